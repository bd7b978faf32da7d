"""Floor division and remainder with torch's values.

torch divides floats by ``fmod`` first: ``(a - fmod(a, b)) / b``, one less where the remainder's
sign is not the divisor's, so ``a // b`` is the floor of the exact quotient. torch.onnx writes
``Floor(Div(a, b))``, the floor of the rounded quotient: ``-7.0 // 0.7`` (0.7 is 0.699999988 in
float32, the quotient -10.00000017, rounded to -10.0) gave -10 where torch gives -11, and the
remainder was off by the whole divisor. The standard flavour follows torch's steps on ONNX's
``Mod`` with ``fmod=1`` (C's fmod, exact on ONNX Runtime). OpenVINO's ``Mod`` is not C's fmod
(``a - trunc(a / b) * b`` in float32: fmod(-7, 0.7) is 0, fmod(1, inf) NaN), so its flavour keeps
the rounded quotient's floor for floats, as torch.onnx did (``docs/internals.md``).

Integers, every flavour: ``a - fmod(a, b)`` (the remainder with the dividend's sign) is a multiple
of ``b``, so dividing it is exact whatever a runtime's integer ``Div`` rounds to; the floor is one
less where that remainder's sign is not the divisor's. A divisor read
from a shape (``i % x.shape[1]`` at a dynamic size) is a graph value, which torch.onnx's own
translation refused. OpenVINO computes an integer ``Div`` and ``Mod`` in float32 (``16777217 % 1000``
gave 216): its flavour divides int32 and int64 with ``exact_integers.py`` instead.

Sizes, every flavour: torch.onnx writes a size's ``//`` (``operator.floordiv`` on symbolic ints) as
ONNX's integer ``Div``, which ONNX Runtime and OpenVINO truncate: ``-(-h // 4)``, the ceiling of
``h / 4``, was ``h // 4`` wherever 4 does not divide ``h``, and lower()'s check, at sizes people pick
as multiples of 32, passed. ``size_floor_divide`` writes it as the integers' floor division above.
A pass cannot do it: torch.onnx exports the graph again, and the shape environment simplifies a
rewritten ``(a + k*b) // b - k`` back to ``a // b``.
"""

from __future__ import annotations

from typing import Any

from onnx import TensorProto
from onnxscript import opset18 as op

from fxdeploy.lowering.onnx_translations import exact_integers

_FLOATS = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16)


def floor_divide(self: Any, other: Any) -> Any:
    """``aten.floor_divide``: torch's floor of the exact quotient."""
    other = op.CastLike(other, self)
    if self.dtype not in _FLOATS:
        return _integer_floor_divide(self, other)
    mod = op.Mod(self, other, fmod=1)
    div = op.Div(op.Sub(self, mod), other)
    div = op.Where(_signs_differ(mod, other), op.Sub(div, op.CastLike(1, div)), div)
    floor = op.Floor(div)
    floor = op.Where(op.Greater(op.Sub(div, floor), op.CastLike(0.5, div)), op.Add(floor, op.CastLike(1, div)), floor)
    return op.Where(op.Equal(other, op.CastLike(0, other)), op.Div(self, other), floor)


def remainder(self: Any, other: Any) -> Any:
    """``aten.remainder``: C's fmod, moved to the divisor's sign as Python's ``%``."""
    other = op.CastLike(other, self)
    if self.dtype not in _FLOATS:
        return op.Mod(self, other, fmod=0)
    mod = op.Mod(self, other, fmod=1)
    return op.Where(_signs_differ(mod, other), op.Add(mod, other), mod)


def div_mode(self: Any, other: Any, rounding_mode: str | None = None) -> Any:
    """``aten.div.Tensor_mode`` / ``Scalar_mode``, with ``floor_divide`` for ``floor``."""
    return floor_divide(self, other) if rounding_mode == "floor" else _other_mode(self, other, rounding_mode)


def floor_divide_openvino(self: Any, other: Any) -> Any:
    if _wide_integers(self, other):
        return exact_integers.floor_divmod(self, _divisor(self, other))[0]
    other = op.CastLike(other, self)
    if self.dtype not in _FLOATS:
        return _integer_floor_divide(self, other)
    floor = op.Floor(op.Div(self, other))  # torch's by a power of two; others are refused (float_floor_divisions)
    return op.Where(op.IsInf(self), op.CastLike(float("nan"), self), floor)  # torch: inf // b is NaN


def remainder_openvino(self: Any, other: Any) -> Any:
    if _wide_integers(self, other):
        return exact_integers.floor_divmod(self, _divisor(self, other))[1]
    other = op.CastLike(other, self)
    if self.dtype not in _FLOATS:
        return op.Mod(self, other, fmod=0)
    return op.Sub(self, op.Mul(op.Floor(op.Div(self, other)), other))


def fmod_openvino(self: Any, other: Any) -> Any:
    """``aten.fmod``: ``a - trunc(a / b) * b``, the truncated quotient exact for int32 and int64."""
    if _wide_integers(self, other):
        divisor = _divisor(self, other)
        return op.Sub(self, op.Mul(exact_integers.trunc_divide(self, divisor), op.CastLike(divisor, self)))
    return op.Mod(self, op.CastLike(other, self), fmod=1)


def div_mode_openvino(self: Any, other: Any, rounding_mode: str | None = None) -> Any:
    if rounding_mode == "floor":
        return floor_divide_openvino(self, other)
    if rounding_mode == "trunc" and _wide_integers(self, other):
        return exact_integers.trunc_divide(self, _divisor(self, other))
    return _other_mode(self, other, rounding_mode)


def _wide_integers(self: Any, other: Any) -> bool:
    """int32 or int64 by an integer: OpenVINO divides them in float32 (``exact_integers.py``)."""
    if self.dtype not in exact_integers.WIDE:
        return False
    return type(other) is int or (not isinstance(other, (bool, float)) and other.dtype not in _FLOATS)


def _divisor(self: Any, other: Any) -> Any:
    """A Python int as it is (``exact_integers`` picks its path by it), a tensor in ``self``'s type."""
    return other if type(other) is int else op.CastLike(other, self)


def _other_mode(self: Any, other: Any, rounding_mode: str | None) -> Any:
    """True division, or ``trunc``: the rounded quotient truncated for floats (as torch), the exact
    one for integers."""
    other = op.CastLike(other, self)
    if rounding_mode != "trunc":
        return op.Div(self, other)
    if self.dtype not in _FLOATS:
        return op.Div(op.Sub(self, op.Mod(self, other, fmod=1)), other)
    quotient = op.Div(self, other)
    return op.Where(op.Less(quotient, op.CastLike(0, quotient)), op.Ceil(quotient), op.Floor(quotient))


def size_floor_divide(self: Any, other: Any) -> Any:
    """``operator.floordiv`` of sizes: Python's floor, whatever the signs."""
    return _integer_floor_divide(self, op.CastLike(other, self))


def _integer_floor_divide(self: Any, other: Any) -> Any:
    """The quotient of ``a - fmod(a, b)``, no larger than ``a`` (``a - Mod(a, b)``, the floored multiple,
    is 2**31 at int32's edge: ``(2**30 + 1) // -2**30`` gave 2), one less where ``fmod`` moved. ``fmod`` is
    ``Mod(a, b) - b`` where that is nonzero and ``a`` and ``b`` differ in sign: ``Mod`` with ``fmod=1`` of
    integers is outside ONNX's definition, and no ``Where``, which ONNX Runtime lacks for int8 and int16."""
    mod = op.Mod(self, other, fmod=0)
    zero = op.CastLike(0, mod)
    moved = op.CastLike(op.And(op.Not(op.Equal(mod, zero)), op.Xor(op.Less(self, zero), op.Less(other, zero))), mod)
    truncated = op.Div(op.Sub(self, op.Sub(mod, op.Mul(moved, other))), other)
    return op.Sub(truncated, moved)


def _signs_differ(mod: Any, divisor: Any) -> Any:
    """A nonzero remainder whose sign is not the divisor's."""
    zero = op.CastLike(0, mod)
    return op.And(op.Not(op.Equal(mod, zero)), op.Xor(op.Less(mod, zero), op.Less(divisor, zero)))
