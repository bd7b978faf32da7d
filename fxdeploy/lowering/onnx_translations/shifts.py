"""``x << n`` and ``x >> n`` of unsigned integers as ONNX's ``BitShift``, which is defined on them.

torch.onnx's own translation (onnxscript's torch_lib) goes through the unsigned type and casts
every result to the *signed* type of the same width, unsigned inputs included: a uint8 ``200 >> 2``
came back as an int8, and a following ``| 1`` became an int8/uint8 ``BitwiseOr`` that ONNX Runtime
refuses to load. Signed integers keep torch_lib's translation (an arithmetic right shift written
with the unsigned type's logical one; an int16 one in int32, since it writes a ``Where`` of int16, which
ONNX Runtime lacks), except on OpenVINO, which computes ``BitShift`` in float32
(``(2**24 + 999) >> 2`` one too high) and int64 as int32 (``-1 >> 2`` gave 2147483647): there a
signed shift is a floor division or a product (``exact_integers.py``), int8 and int16 ones in int32,
a left shift's result wrapped back into the type's range.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnxscript import ir
from onnxscript import opset18 as op
from onnxscript.function_libs.torch_lib.ops import core

from fxdeploy.lowering.onnx_translations import exact_integers
from fxdeploy.lowering.onnx_translations._common import const

UNSIGNED = {ir.DataType.UINT8: np.uint8, ir.DataType.UINT16: np.uint16, ir.DataType.UINT32: np.uint32,
            ir.DataType.UINT64: np.uint64}
NARROW = {ir.DataType.UINT8: 0xFF, ir.DataType.UINT16: 0xFFFF}


def left_shift(x: Any, other: Any) -> Any:
    """``aten.__lshift__`` and ``aten.bitwise_left_shift``, by a tensor or a Python int. A uint8 or
    uint16 shifts in uint32 and keeps its own low bits: OpenVINO saturates the narrow BitShift
    (a uint8 ``200 << 1`` gave 255, where torch wraps to 144)."""
    if x.dtype in NARROW:
        wide = op.BitShift(op.Cast(x, to=ir.DataType.UINT32), _amount(x, other, ir.DataType.UINT32), direction="LEFT")
        return op.Cast(op.BitwiseAnd(wide, const(NARROW[x.dtype], np.uint32)), to=x.dtype)
    if x.dtype in UNSIGNED:
        return op.BitShift(x, _amount(x, other), direction="LEFT")
    if isinstance(other, int):
        return core.aten_bitwise_left_shift_tensor_scalar(x, other)
    return core.aten_bitwise_left_shift(x, other)


def right_shift(x: Any, other: Any) -> Any:
    """``aten.__rshift__`` and ``aten.bitwise_right_shift``, by a tensor or a Python int. A uint8 or
    uint16 shifts in uint32: OpenVINO's uint8 BitShift at a dynamic shape rounds (``255 >> 2`` gave
    64, ``3 >> 2`` gave 1; exact at a static shape, and in uint16, uint32 and uint64)."""
    if x.dtype in NARROW:
        wide = op.BitShift(op.Cast(x, to=ir.DataType.UINT32), _amount(x, other, ir.DataType.UINT32), direction="RIGHT")
        return op.Cast(wide, to=x.dtype)
    if x.dtype in UNSIGNED:
        return op.BitShift(x, _amount(x, other), direction="RIGHT")
    if x.dtype == ir.DataType.INT16:  # torch_lib's signed shift writes a Where, which ONNX Runtime lacks for int16
        wide = op.Cast(x, to=ir.DataType.INT32)
        wide.dtype = ir.DataType.INT32  # torch_lib's shift reads it
        if not isinstance(other, int):
            other = op.Cast(other, to=ir.DataType.INT32)
            other.dtype = ir.DataType.INT32
        return op.Cast(right_shift(wide, other), to=x.dtype)
    if isinstance(other, int):
        return core.aten_bitwise_right_shift_tensor_scalar(x, other)
    return core.aten_bitwise_right_shift(x, other)


SIGNED_NARROW = {ir.DataType.INT8: 8, ir.DataType.INT16: 16}


def left_shift_openvino(x: Any, other: Any) -> Any:
    """``left_shift``, a signed ``x`` shifted as a product: in int32 for int8 and int16, wrapped back."""
    if x.dtype in exact_integers.WIDE:
        return exact_integers.left_shift(x, other)
    if x.dtype not in SIGNED_NARROW:
        return left_shift(x, other)
    half = 2 ** (SIGNED_NARROW[x.dtype] - 1)
    wide = exact_integers.left_shift(op.Cast(x, to=ir.DataType.INT32), other)
    offset = const(half, np.int32)
    wrapped = op.Sub(op.BitwiseAnd(op.Add(wide, offset), const(2 * half - 1, np.int32)), offset)
    return op.Cast(wrapped, to=x.dtype)


def right_shift_openvino(x: Any, other: Any) -> Any:
    """``right_shift``, a signed ``x`` shifted as a floor division: in int32 for int8 and int16."""
    if x.dtype in exact_integers.WIDE:
        return exact_integers.right_shift(x, other)
    if x.dtype not in SIGNED_NARROW:
        return right_shift(x, other)
    return op.Cast(exact_integers.right_shift(op.Cast(x, to=ir.DataType.INT32), other), to=x.dtype)


def _amount(x: Any, other: Any, dtype: ir.DataType | None = None) -> Any:
    """The shift amount in ``dtype`` (``x``'s by default), as BitShift requires (torch allows
    another integer type)."""
    dtype = dtype or x.dtype
    if isinstance(other, int):
        return const(other, UNSIGNED[dtype])
    return other if other.dtype == dtype else op.Cast(other, to=dtype)
