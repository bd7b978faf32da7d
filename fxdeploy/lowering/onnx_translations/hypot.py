"""``torch.hypot`` (every flavour): torch.onnx has no translation for it (``prims.hypot``), so a model
computing a distance with it was refused.

``sqrt(x^2 + y^2)`` overflows float32 for coordinates past 1.8e19 and underflows below 1e-19, where
torch's (C's ``hypot``) does not. So: ``m * sqrt(1 + (n / m)^2)`` with ``m = max(|x|, |y|)`` and
``n = min(|x|, |y|)``; 0 where both are 0; IEEE's special cases last, in its order: +inf where either
is infinite (even with a NaN beside it), else NaN where either is NaN. Within two float32 steps of
torch's; below float32's smallest normal, within that smallest normal (the runtimes may flush).
Half types are computed in float32 and rounded once. (OpenVINO drops a model's own casts to half,
so there ``hypot(a.half(), b.half())`` of an ``a`` past half's range is not inf.)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from onnx import TensorProto
from onnxscript import opset18 as op

from fxdeploy.lowering.onnx_translations._common import const


def hypot(x: Any, y: Any) -> Any:
    """``aten.hypot``: both operands are of one float type, as torch's promotion hands them over."""
    out = x.dtype
    work = TensorProto.DOUBLE if out == TensorProto.DOUBLE else TensorProto.FLOAT
    x, y = op.Cast(x, to=work), op.Cast(y, to=work)
    ax, ay = op.Abs(x), op.Abs(y)
    larger = op.Greater(ax, ay)
    m, n = op.Where(larger, ax, ay), op.Where(larger, ay, ax)
    zero = op.CastLike(const(0.0, np.float32), x)
    one = op.CastLike(const(1.0, np.float32), x)
    # below the smallest normal float32 the runtimes may read values as 0 (0 / 0 was NaN): there the
    # result is m, off by less than that smallest normal
    subnormal = op.Less(m, op.CastLike(const(float(np.finfo(np.float32).tiny), np.float32), x))
    ratio = op.Where(subnormal, zero, op.Div(n, op.Where(subnormal, one, m)))
    result = op.Where(op.Equal(m, zero), zero, op.Mul(m, op.Sqrt(op.Add(one, op.Mul(ratio, ratio)))))
    result = op.Where(op.Or(op.IsNaN(x), op.IsNaN(y)), op.CastLike(const(math.nan, np.float32), x), result)
    result = op.Where(op.Or(op.IsInf(x), op.IsInf(y)), op.CastLike(const(math.inf, np.float32), x), result)
    return result if out == work else op.Cast(result, to=out)
