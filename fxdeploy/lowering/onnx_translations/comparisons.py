"""``>`` and ``>=`` for OpenVINO (the ``openvino`` flavour): written as ``Less``/``LessOrEqual``
with the operands swapped, the same value for every pair of numbers.

OpenVINO 2026.4's CPU plugin computes ONNX's ``Greater`` and ``GreaterOrEqual`` as true where
either operand is NaN on an AVX-512 CPU (an unordered compare; IEEE and torch give false); the
AVX2-only machines of earlier runs passed the test that found it. ``Less``, ``LessOrEqual`` and
``Equal`` are right there. Seen with
``x > x.median(dim=1, keepdim=True).values`` on a row holding a NaN (torch's median is then
NaN): every element of the row came out true. Booleans keep torch.onnx's formulas (ONNX's
comparisons take no booleans).
"""

from __future__ import annotations

from typing import Any

from onnx import TensorProto
from onnxscript import opset18 as op


def greater(self: Any, other: Any) -> Any:
    """``aten.gt``: ``other < self``."""
    if self.dtype == TensorProto.BOOL:
        return op.And(self, op.Not(other))
    return op.Less(other, self)


def greater_equal(self: Any, other: Any) -> Any:
    """``aten.ge``: ``other <= self``."""
    if self.dtype == TensorProto.BOOL:
        return op.Or(self, op.Not(other))
    return op.LessOrEqual(other, self)
