"""``torch.fmax`` and ``torch.fmin`` (every flavour): torch.onnx decomposes them to ``prims.fmax``
and ``prims.fmin``, which it cannot translate, so a model taking the larger of two values while
ignoring a NaN was refused.

C's ``fmax``: where exactly one operand is NaN, the other; NaN only where both are. So ONNX's
``Max`` (``Min``) where neither is NaN, then each operand where the other is NaN: ONNX leaves
``Max`` of a NaN unspecified (ONNX Runtime propagates it, OpenVINO drops it), and the ``Where``s
decide every such element. Integers have no NaN: ``Max`` alone.
"""

from __future__ import annotations

from typing import Any

from onnx import TensorProto
from onnxscript import opset18 as op

_FLOATS = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16)


def fmax(self: Any, other: Any) -> Any:
    """``aten.fmax``: both operands of one type, as torch's promotion hands them over."""
    return _ignoring_nan(self, other, op.Max(self, other))


def fmin(self: Any, other: Any) -> Any:
    """``aten.fmin``: as ``fmax``, with ``Min``."""
    return _ignoring_nan(self, other, op.Min(self, other))


def _ignoring_nan(self: Any, other: Any, both: Any) -> Any:
    if self.dtype not in _FLOATS:
        return both
    return op.Where(op.IsNaN(self), other, op.Where(op.IsNaN(other), self, both))
