"""Integer floor division, remainder and shifts on OpenVINO, in ops its CPU plugin computes exactly.

OpenVINO 2026.4's CPU plugin computes int64 as int32 (its precision conversion), and ONNX's integer
``Div``, ``Mod`` (either ``fmod``) and ``BitShift`` in float32: ``16777217 % 1000`` gave 216 (torch
217), ``x // 7`` at 2**30 was 7 off, ``(2**24 + 999) >> 2`` was one above torch's, and torch.onnx's
signed ``>>`` (a logical shift of the unsigned type, ORed with a mask) made ``-1 >> 2`` 2147483647.
Its ``Add``, ``Sub``, ``Mul`` and bitwise ops are exact int32 arithmetic, wrapping modulo 2**32: a sum
of products then gives the true value wherever that value fits in int32, whatever the intermediate
ones. Its int32 comparisons and ``Where`` go through float32 as well (``255357749 >= 255357750`` was
true, a select of 16777217 gave 16777216), so every comparison here is of a value with 0, whose sign
float32 keeps, and a select of large values is ``y + c * (x - y)``. Its float ``Div`` multiplies by the
divisor's rounded reciprocal: a quotient is a few float32 steps off, not one half.

``floor_divmod`` finds ``q = floor(a / b)`` from a float32 estimate, corrected twice (``|a| <= 2**31``):

- ``q0 = floor(f(a) / f(b))`` (clipped into int32) is within ``4 * 2**-24 * |a / b| + 1`` of the quotient,
  so ``r0 = a - q0 * b``, computed exactly, lies within ``|b| + 640``.
- ``q1 = q0 + floor(f(r0) / f(b))`` is within one of ``q``: where ``|b| < 2**24 - 640``, ``r0 / b`` is
  below 641 and its float32 quotient within ``2**-12`` of it; where ``|b| <= 2**30``, ``|q| < 129`` and
  ``q0`` was already within one. ``r1 = a - q1 * b`` lies in ``[-|b|, 2|b|)`` (``b``'s way), in int32.
- One step, down where ``r1`` is nonzero with the sign not ``b``'s, up where ``r1 - b`` has ``b``'s
  sign or is 0, gives ``q`` and ``r = a - q * b``.

A divisor beyond 2**30 (``q`` between -2 and 1) is read off the signs of ``a - b`` and ``a + b``. The
result is torch's for every int32 ``a`` and nonzero ``b`` whose quotient fits (not ``-2**31 // -1``):
``tests/lowering/test_onnx_exact_integers.py`` runs every pair of dividends and divisors at int32's
edges on OpenVINO. Values beyond int32 are out of OpenVINO's reach whatever the graph
(``fxdeploy/runtime/openvino.py`` refuses such an input).

A signed right shift by ``k`` is ``floor(a / 2**k)`` (torch's arithmetic shift), the sign where ``k``
is negative or 31 and above; a left shift is ``a * 2**k`` (wrapping, as torch's), 0 where ``k`` is
negative or 32 and above.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto
from onnxscript import ir
from onnxscript import opset18 as op

from fxdeploy.lowering.onnx_translations._common import const

WIDE = (ir.DataType.INT32, ir.DataType.INT64)
"""The integer types whose values reach past float32's 2**24; narrower ones divide exactly in float32."""
HUGE = 2**30
"""Divisors up to this take the float32 estimate; above it the quotient is read off comparisons."""
POWERS = [2**k for k in range(31)]


def floor_divmod(a: Any, b: Any) -> tuple[Any, Any]:
    """``(a // b, a % b)`` with torch's (Python's) floor rounding; ``b`` a tensor of ``a``'s type or an int."""
    divisor = b if not isinstance(b, int) else op.CastLike(b, a)
    q, r = _estimated(a, divisor)
    if isinstance(b, int) and abs(b) <= HUGE:
        return q, r
    zero, bound = _like(0, a), _like(HUGE, a)
    huge = op.Or(op.And(op.Greater(divisor, zero), _positive(op.Sub(divisor, bound))),
                 op.And(op.Less(divisor, zero), _negative(op.Add(divisor, bound))))
    q = _select(huge, _huge(a, divisor), q)
    return q, op.Sub(a, op.Mul(q, divisor))


def trunc_divide(a: Any, b: Any) -> Any:
    """``torch.div(a, b, rounding_mode="trunc")``: the floor, one up where the quotient is negative and inexact."""
    q, r = floor_divmod(a, b)
    divisor = b if not isinstance(b, int) else op.CastLike(b, a)
    inexact_negative = op.And(op.Not(op.Equal(r, _like(0, a))), _signs_differ(a, divisor))
    return op.Add(q, op.CastLike(inexact_negative, a))


def right_shift(a: Any, k: Any) -> Any:
    """``a >> k`` for a signed ``a``: ``floor(a / 2**k)``; the sign for ``k`` past 30 or negative."""
    sign = op.Where(_negative(a), _like(-1, a), _like(0, a))
    if isinstance(k, int):
        return floor_divmod(a, 2**k)[0] if 0 <= k <= 30 else sign
    k = op.Cast(k, to=TensorProto.INT64)
    power = op.CastLike(op.Gather(const(POWERS), op.Clip(k, const(0), const(30))), a)
    out_of_range = op.Or(op.Less(k, const(0)), op.Greater(k, const(30)))
    return _select(out_of_range, sign, _estimated(a, power)[0])


def left_shift(a: Any, k: Any) -> Any:
    """``a << k`` for a signed ``a``: ``a * 2**k``, wrapping; 0 for ``k`` past 31 or negative."""
    if isinstance(k, int):
        if not 0 <= k <= 31:
            return op.Mul(a, _like(0, a))
        return op.Mul(op.Mul(a, _like(2 ** min(k, 30), a)), _like(2 ** (k - min(k, 30)), a))
    k = op.Cast(k, to=TensorProto.INT64)
    low = op.CastLike(op.Gather(const(POWERS), op.Clip(k, const(0), const(30))), a)
    high = op.CastLike(op.Gather(const(POWERS), op.Clip(op.Sub(k, const(30)), const(0), const(1))), a)
    out_of_range = op.Or(op.Less(k, const(0)), op.Greater(k, const(31)))
    return op.Mul(op.Mul(op.Mul(a, low), high), op.CastLike(op.Not(out_of_range), a))


def _estimated(a: Any, b: Any) -> tuple[Any, Any]:
    """Floor quotient and remainder for ``|b| <= 2**30``: a float32 estimate, corrected (the docstring above)."""
    af, bf = op.Cast(a, to=TensorProto.FLOAT), op.Cast(b, to=TensorProto.FLOAT)
    estimate = op.Clip(op.Floor(op.Div(af, bf)), const(-(2.0**31), np.float32), const(2.0**31 - 128, np.float32))
    q0 = op.CastLike(estimate, a)
    r0 = op.Sub(a, op.Mul(q0, b))
    q1 = op.Add(q0, op.CastLike(op.Floor(op.Div(op.Cast(r0, to=TensorProto.FLOAT), bf)), a))
    r1 = op.Sub(a, op.Mul(q1, b))
    negative_b = _negative(b)
    wrong_side = op.And(op.Not(op.Equal(r1, _like(0, a))), _signs_differ(r1, b))
    past_b = op.Sub(r1, b)
    beyond = op.Or(op.And(negative_b, op.Not(_positive(past_b))), op.And(op.Not(negative_b), op.Not(_negative(past_b))))
    step = op.Sub(op.CastLike(beyond, a), op.CastLike(wrong_side, a))
    return op.Add(q1, step), op.Sub(r1, op.Mul(step, b))


def _huge(a: Any, b: Any) -> Any:
    """``floor(a / b)`` for ``|b| > 2**30`` and int32 ``a``: between -2 and 1, read off the signs of
    ``a - b`` (where ``a`` and ``b`` have one sign) and ``a + b`` (where they differ), which fit in int32."""
    zero, difference, total = _like(0, a), op.Sub(a, b), op.Add(a, b)
    negative_a = _negative(a)
    by_positive = op.Where(negative_a, op.Where(_negative(total), _like(-2, a), _like(-1, a)),
                           op.Where(_negative(difference), zero, _like(1, a)))
    by_negative = op.Where(negative_a, op.Where(_positive(difference), zero, _like(1, a)),
                           op.Where(_positive(a), op.Where(_positive(total), _like(-2, a), _like(-1, a)), zero))
    return op.Where(_positive(b), by_positive, by_negative)


def _select(condition: Any, x: Any, y: Any) -> Any:
    """``where(condition, x, y)`` as ``y + condition * (x - y)``: OpenVINO's Select of int32 went through
    float32 (16777217 came out 16777216); products and sums wrap exactly."""
    return op.Add(y, op.Mul(op.CastLike(condition, y), op.Sub(x, y)))


def _signs_differ(x: Any, y: Any) -> Any:
    return op.Xor(_negative(x), _negative(y))


def _negative(x: Any) -> Any:
    """``x < 0``. OpenVINO compares int32 in float32, which keeps the sign (``x < y`` would not be exact)."""
    return op.Less(x, op.CastLike(0, x))


def _positive(x: Any) -> Any:
    return op.Greater(x, op.CastLike(0, x))


def _like(value: int, like: Any) -> Any:
    return op.CastLike(value, like)
