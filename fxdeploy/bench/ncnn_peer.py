"""The pnnx + ncnn peer, used directly: what a user of ncnn does without fxdeploy.

pnnx converts a ``torch.jit.trace`` of the model, traced at one image, since ncnn blobs have no
batch axis; the net then runs one image at a time at fp32 (ncnn's defaults turn on fp16 storage
and arithmetic). The trace goes through a wrapper returning the output leaves as a tuple, since
``torch.jit.trace`` cannot return dicts of lists; a user would do the same.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils import _pytree as pytree

from fxdeploy.bench.context import BenchContext, Row
from fxdeploy.bench.peers import unflattener
from fxdeploy.errors import first_line


def ncnn_peer_row(ctx: BenchContext, reference: Any) -> Row:
    row = Row("peer:pnnx+ncnn", "peer", lower_measurement="in-process")
    try:
        import ncnn
        import pnnx
    except ImportError as exc:
        return row.failed(f"not installed: {exc}", "unavailable")
    row.version = f"ncnn {ncnn.__version__}"
    tensors = [x for x in pytree.tree_leaves(ctx.inputs) if isinstance(x, torch.Tensor)]
    if not tensors or any(x.dim() == 0 or x.dtype != torch.float32 for x in tensors):
        return row.failed("pnnx+ncnn needs float32 inputs with a batch dim")
    out = ctx.work / "peer-ncnn"
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        traced = torch.jit.trace(_FlatOutputs(ctx.model), tuple(x[:1] for x in tensors), strict=False)
        traced.save(str(out / "model.pt"))
        log = _convert(pnnx, out, [x[:1] for x in tensors])
    except Exception as exc:  # noqa: BLE001
        return row.failed(f"torch.jit.trace for pnnx failed: {first_line(exc)}")
    row.lower_s = time.perf_counter() - start
    param, weights = out / "model.ncnn.param", out / "model.ncnn.bin"
    if not (param.is_file() and weights.is_file()):
        return row.failed(f"pnnx did not convert the model: {log}")
    net = ncnn.Net()
    opt = net.opt
    opt.num_threads, opt.use_vulkan_compute = ctx.threads, False
    for flag in ("use_fp16_packed", "use_fp16_storage", "use_fp16_arithmetic", "use_bf16_storage", "use_bf16_packed"):
        setattr(opt, flag, False)
    if net.load_param(str(param)) != 0 or net.load_model(str(weights)) != 0:
        return row.failed("ncnn could not load the param/bin pnnx wrote")
    leaves = [x for x in pytree.tree_leaves(reference) if isinstance(x, torch.Tensor)]
    contiguous = [x.contiguous() for x in tensors]
    row.artifact_bytes = param.stat().st_size + weights.stat().st_size
    row.fn = lambda: _run_ncnn(ncnn, net, [x.numpy() for x in contiguous], len(leaves))
    rebuild = unflattener(reference)
    shapes = [leaf.shape for leaf in leaves]
    row.adapt = lambda raw: rebuild(
        [torch.from_numpy(np.stack([img[k] for img in raw]).reshape(shape)) for k, shape in enumerate(shapes)]
    )
    return row


def _run_ncnn(ncnn: Any, net: Any, arrays: list[np.ndarray], outputs: int) -> list[list[np.ndarray]]:
    images = []
    for b in range(arrays[0].shape[0]):
        extractor = net.create_extractor()
        mats = [ncnn.Mat(a[b]) for a in arrays]  # kept alive while the extractor borrows them
        for k, mat in enumerate(mats):
            extractor.input(f"in{k}", mat)
        images.append([np.array(extractor.extract(f"out{k}")[1]) for k in range(outputs)])
    return images


class _FlatOutputs(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(x for x in pytree.tree_leaves(self.model(*args)) if isinstance(x, torch.Tensor))


def _convert(pnnx: Any, out: Path, inputs: list[torch.Tensor]) -> str:
    """pnnx prints pages of progress from its executable; keep them out of the terminal."""
    with _captured_fds() as log_path:
        try:
            pnnx.convert(str(out / "model.pt"), inputs, ncnnparam=str(out / "model.ncnn.param"),
                         ncnnbin=str(out / "model.ncnn.bin"), fp16=False)
        except Exception:  # noqa: BLE001, S110 - it also imports the generated model_pnnx.py;
            pass  # only the param/bin matter, and their absence is reported by the caller
    log = Path(log_path)
    lines = log.read_text(errors="replace").strip().splitlines()
    log.unlink()
    return " | ".join(lines[-5:])


@contextlib.contextmanager
def _captured_fds() -> Iterator[str]:
    handle, path = tempfile.mkstemp(prefix="fxdeploy-pnnx-", suffix=".log")
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(handle, 1)
        os.dup2(handle, 2)
        yield path
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, handle):
            os.close(fd)
