"""``torch.sort(x, stable=True)`` (every flavour): torch.onnx translates ``aten.sort.default`` only,
so a stable sort (``aten.sort.stable``, what ``stable=True`` and ``argsort(stable=True)`` call) was
refused. It is the same TopK over the whole axis: ONNX's TopK orders equal values by their index in
both directions, which is what torch's stable sort does (fxdeploy's OpenVINO reader keeps its TopK
stable, ``fxdeploy.runtime.openvino.read_model``).
"""

from __future__ import annotations

from typing import Any

from onnxscript import opset18 as op

from fxdeploy.lowering.onnx_translations._common import const, rank


def sort_stable(x: Any, stable: bool | None = None, dim: int = -1, descending: bool = False) -> tuple[Any, Any]:
    """``aten.sort.stable``: values and int64 indices along ``dim``."""
    if rank(x) == 0:
        return op.Identity(x), op.Constant(value_int=0)
    axis = dim % rank(x)
    size = op.Reshape(op.Gather(op.Shape(x), const(axis), axis=0), const([1]))
    return op.TopK(x, size, axis=axis, largest=int(descending), sorted=1)
