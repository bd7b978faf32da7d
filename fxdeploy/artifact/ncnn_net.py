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

from fxdeploy.artifact.ncnn_options import SPIN_MS, configure
from fxdeploy.errors import FxDeployError

__all__ = ["SPIN_MS", "as_ids", "configure", "load_net"]


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
