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


def configure(opt: Any, *, threads: int, fp16: bool) -> None:
    """Every precision switch set explicitly: ncnn's defaults enable fp16 storage and arithmetic,
    and bf16 where the CPU has it. Vulkan stays off: fxdeploy's ncnn target runs on the CPU."""
    opt.num_threads = threads
    opt.use_vulkan_compute = False
    opt.use_fp16_packed = fp16
    opt.use_fp16_storage = fp16
    opt.use_fp16_arithmetic = fp16
    opt.use_bf16_storage = False
    opt.use_bf16_packed = False


def load_net(param: Path, weights: Path, *, threads: int, fp16: bool, error: type[FxDeployError]) -> Any:
    """A configured Net holding ``param`` and ``weights``; a file ncnn cannot load raises ``error``
    (the runtime's ArtifactError, the lowering's LoweringError) naming the file and ncnn's code."""
    import ncnn

    net = ncnn.Net()
    configure(net.opt, threads=threads, fp16=fp16)
    for path, loader in ((param, net.load_param), (weights, net.load_model)):
        code = loader(str(path))
        if code != 0:
            raise error(f"ncnn: loading {path} failed with code {code}")
    return net
