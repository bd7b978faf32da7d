"""``F.logsigmoid`` as torch computes it, ``min(x, 0) - log1p(exp(-|x|))`` (every flavour).

torch.onnx's own translation is ``Log(Sigmoid(x))``: the sigmoid of x below about -88 is 0 in
float32, and its log -inf, where torch gives x itself (``logsigmoid(-100)`` is -100); above about
17 the sigmoid rounds to 1 and the log to 0, where torch gives ``-exp(-x)``. Scores kept as
log-probabilities meet those values on ordinary data.

ONNX has no ``log1p``. For ``e`` below 1/32 it is the series ``e - e^2/2 + e^3/3 - e^4/4 + e^5/5``
(the next term is below 5e-9 of the sum), so no ``log`` of a value near 1 is taken: OpenVINO's CPU
``Log`` is off by about 1e-6 there, which made ``logsigmoid(15)`` -9e-7 for torch's -3e-7. Above,
it is ``e * log(u) / (u - 1)`` with ``u = 1 + e``, within a few ulps.
``min(x, 0)`` is ``where(x > 0, 0, x)``, so a NaN stays NaN. Half types are computed in float32
and rounded once.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto
from onnxscript import opset18 as op

from fxdeploy.lowering.onnx_translations._common import const

HALVES = (TensorProto.FLOAT16, TensorProto.BFLOAT16)


def log_sigmoid(x: Any) -> Any:
    """``aten.log_sigmoid``."""
    half = x.dtype in HALVES
    if half:
        dtype, x = x.dtype, op.Cast(x, to=TensorProto.FLOAT)
    zero, one = op.CastLike(const(0.0, np.float32), x), op.CastLike(const(1.0, np.float32), x)
    e = op.Exp(op.Neg(op.Abs(x)))
    u = op.Add(one, e)
    series = op.CastLike(const(1.0 / 5, np.float32), x)
    for c in (1.0 / 4, 1.0 / 3, 1.0 / 2, 1.0):  # Horner: 1 - e/2 + e^2/3 - e^3/4 + e^4/5
        series = op.Sub(op.CastLike(const(c, np.float32), x), op.Mul(e, series))
    small = op.Less(e, op.CastLike(const(1.0 / 32, np.float32), x))
    log1p = op.Where(small, op.Mul(e, series), op.Div(op.Mul(e, op.Log(u)), op.Sub(u, one)))
    out = op.Sub(op.Where(op.Greater(x, zero), zero, x), log1p)
    return op.Cast(out, to=dtype) if half else out
