"""The one place an ``ncnn.Net`` is made and loaded, with every switch set explicitly.

The runtime runs engine stages with it, and the lowering runs each engine once on the example
image (to learn how it takes its inputs) with the same switches, so what the lowering checks is
what the runtime runs. It sits beside ``onnx_files`` rather than under ``runtime/`` because the
lowering never imports the runtime layer; like every optional runtime, ``ncnn`` is imported only
when a net is made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fxdeploy.errors import FxDeployError

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


def load_net(
    param: Path, weights: Path, *, threads: int, fp16: bool, error: type[FxDeployError], spin_ms: int = SPIN_MS,
) -> Any:
    """A configured Net holding ``param`` and ``weights``; a file ncnn cannot load raises ``error``
    (the runtime's ArtifactError, the lowering's LoweringError) naming the file and ncnn's code."""
    import ncnn

    net = ncnn.Net()
    configure(net.opt, threads=threads, fp16=fp16, spin_ms=spin_ms)
    for path, loader in ((param, net.load_param), (weights, net.load_model)):
        code = loader(str(path))
        if code != 0:
            raise error(f"ncnn: loading {path} failed with code {code}")
    return net


def as_ids(values: Any) -> Any:
    """Integer ids (a numpy array) as ncnn's Embed reads them: their int32 bits, in a float32 array
    as ``ncnn.Mat`` takes it."""
    import numpy as np

    return np.ascontiguousarray(values, dtype=np.int32).view(np.float32)
