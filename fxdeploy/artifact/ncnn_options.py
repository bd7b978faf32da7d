"""The switches an ``ncnn.Net`` runs with, set explicitly (``ncnn_net`` makes the nets). It imports
nothing: the lowering's trial run (``lowering/ncnn_trial.py``) loads it by its path in a child
process that imports numpy and ncnn only, so that it runs the net as the runtime does.
"""

from __future__ import annotations

from typing import Any

SPIN_MS = 20
"""ncnn's own default ``openmp_blocktime``: its OpenMP threads spin this long for the next layer."""


def configure(opt: Any, *, threads: int, fp16: bool, spin_ms: int = SPIN_MS) -> None:
    """Every precision switch set explicitly: ncnn's defaults enable fp16 storage and arithmetic,
    and bf16 where the CPU has it. Vulkan stays off: fxdeploy's ncnn target runs on the CPU.

    ``spin_ms`` is the net's ``openmp_blocktime``, which ncnn applies around each of its own
    extractions only (and restores after), so it never reaches another net or library. A plan
    with host stages passes 0: between two engine stages the host runs torch ops, and threads
    spinning there compete with them, ruinously so when another process shares the CPU. ncnn
    applies it where it is built against LLVM's OpenMP (``kmp_set_blocktime``); a GCC build
    (libgomp, as the Linux wheels are) has no such call and keeps spinning as its environment says
    (``OMP_WAIT_POLICY``)."""
    opt.num_threads = threads
    opt.openmp_blocktime = spin_ms
    opt.use_vulkan_compute = False
    opt.use_fp16_packed = fp16
    opt.use_fp16_storage = fp16
    opt.use_fp16_arithmetic = fp16
    opt.use_bf16_storage = False
    opt.use_bf16_packed = False
