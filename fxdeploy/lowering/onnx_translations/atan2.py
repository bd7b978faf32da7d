"""``torch.atan2`` and the angle of a real tensor, with torch's signed zeros, infinities and NaNs (every flavour).

torch.onnx's own translation (onnxscript's torch_lib) is ``atan(y / x)`` moved by pi where ``x < 0``, by the sign of
``y > 0``, with NaN mapped to 0: a y of +0 with x < 0 took the ``-pi`` branch (``atan2(+0, -1)`` gave -pi for torch's
pi), a -0 x was not "west" (``atan2(+0, -0)`` gave 0 for pi, ``atan2(1, -0)`` -pi/2 for pi/2), and ``0 / 0``,
``inf / inf`` and NaN inputs all came back 0 (torch: 0 or pi, pi/4 or 3pi/4, NaN). A box with a zero height and a
negative width, or the phase of a spectrum, meets those inputs on ordinary data.

Here the angle is built from magnitudes, ``theta = atan(|y| / |x|)`` in [0, pi/2] (0 where ``y == 0``, pi/4 where
both are infinite), mirrored to ``pi - theta`` where x is negative and negated where y is, IEEE's atan2 (C99 Annex F)
case by case. "Negative" includes -0, which no ONNX comparison sees: ONNX has no signbit, but ``1 / -0`` is -inf.
The sign is applied last, as a product with +-1: ONNX Runtime's Where adds the picked side to a zero, so it never
returns -0 (``atan2(-0, +0)`` came back +0 from a Where between -0 and the negated angle).
Half types are computed in float32 and rounded once, as torch's CPU kernel does.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from onnx import TensorProto
from onnxscript import opset18 as op

from fxdeploy.lowering.onnx_translations._common import const

FLOATS = (TensorProto.FLOAT, TensorProto.DOUBLE)
HALVES = (TensorProto.FLOAT16, TensorProto.BFLOAT16)


def atan2(y: Any, x: Any) -> Any:
    """``aten.atan2``: ``y`` and ``x`` promoted as torch does (integers to float32, mixed types to the wider)."""
    out = _result_type(y.dtype, x.dtype)
    work = TensorProto.DOUBLE if out == TensorProto.DOUBLE else TensorProto.FLOAT
    y, x = _cast(y, work), _cast(x, work)
    ay, ax = op.Abs(y), op.Abs(x)
    ratio = op.Where(op.And(op.IsInf(ay), op.IsInf(ax)), _const(math.pi / 4, work), op.Atan(op.Div(ay, ax)))
    theta = op.Where(op.Equal(ay, _const(0.0, work)), _const(0.0, work), ratio)  # 0 / 0 is 0, or pi when west
    angle = op.Where(negative(x, work), op.Sub(_const(math.pi, work), theta), theta)
    angle = op.Where(op.Or(op.IsNaN(y), op.IsNaN(x)), _const(math.nan, work), angle)
    sign = op.Where(negative(y, work), _const(-1.0, work), _const(1.0, work))
    return _cast(op.Mul(angle, sign), out)  # a product, not a Where: ONNX Runtime's Where never returns -0


def angle(x: Any) -> Any:
    """``aten.angle`` of a real tensor: pi where x < 0 (not at -0), 0 elsewhere, NaN at NaN (torch_lib gave 0 there).
    A complex input never reaches this: torch.onnx registers custom translations for real inputs only."""
    out = x.dtype if x.dtype in FLOATS + HALVES else TensorProto.FLOAT
    work = TensorProto.DOUBLE if out == TensorProto.DOUBLE else TensorProto.FLOAT
    x = _cast(x, work)
    zero = _const(0.0, work)
    return _cast(op.Where(op.IsNaN(x), x, op.Where(op.Less(x, zero), _const(math.pi, work), zero)), out)


def negative(v: Any, dtype: int) -> Any:
    """bool: v < 0 or v is -0 (``1 / v`` is -inf only there); False for NaN."""
    return op.Or(op.Less(v, _const(0.0, dtype)), op.Less(op.Div(_const(1.0, dtype), v), _const(0.0, dtype)))


def _result_type(a: int, b: int) -> int:
    if TensorProto.DOUBLE in (a, b):
        return TensorProto.DOUBLE
    if a == b and a in HALVES:
        return a
    floats = [t for t in (a, b) if t in FLOATS + HALVES]
    if len(floats) == 1 and floats[0] in HALVES:  # a half and an integer: the half
        return floats[0]
    return TensorProto.FLOAT


def _cast(v: Any, dtype: int) -> Any:
    return v if v.dtype == dtype else op.Cast(v, to=dtype)


def _const(value: float, dtype: int) -> Any:
    return const(value, np.float64 if dtype == TensorProto.DOUBLE else np.float32)
