"""``torch.roll`` by a shift read from a size.

torch.onnx writes ``aten.roll`` with its shifts as an attribute, so a shift computed from a dynamic
size (``torch.roll(x, x.shape[-1] // 2, -1)``, a centred FFT's ``fftshift``) failed to export with
"Unsupported attribute type". Here each rolled dim is two slices joined end to front: the last
``s`` entries, then the rest, with ``s = shift mod n`` (Python's modulo, so a negative shift rolls
the other way, and ``|shift| > n`` wraps, as torch). Without ``dims`` torch rolls the flattened
tensor and restores its shape; so does this.
"""

from __future__ import annotations

from typing import Any

from onnx import TensorProto
from onnxscript import opset18 as op

from fxdeploy.lowering.onnx_translations._common import const


def roll(self: Any, shifts: Any, dims: Any = ()) -> Any:
    """``aten.roll``: each (shift, dim) pair in turn; the flattened tensor where ``dims`` is empty."""
    shifts, dims = list(shifts), list(dims)
    if not dims:
        flat = _roll_axis(op.Reshape(self, const([-1])), shifts[0], 0)
        return op.Reshape(flat, op.Shape(self))
    rank = len(self.shape)
    for shift, dim in zip(shifts, dims, strict=True):
        self = _roll_axis(self, shift, dim % rank)
    return self


def _roll_axis(x: Any, shift: Any, axis: int) -> Any:
    """The last ``shift mod n`` entries along ``axis``, then the others."""
    n = op.Shape(x, start=axis, end=axis + 1)
    if isinstance(shift, int):
        shift = const([shift])
    else:
        shift = op.Reshape(op.Cast(shift, to=TensorProto.INT64), const([1]))
    cut = op.Sub(n, op.Mod(shift, op.Max(n, const([1])), fmod=0))
    axes = const([axis])
    tail = op.Slice(x, cut, n, axes)
    front = op.Slice(x, const([0]), cut, axes)
    return op.Concat(tail, front, axis=axis)
