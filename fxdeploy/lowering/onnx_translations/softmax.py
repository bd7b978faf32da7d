"""``aten.softmax`` and ``aten._softmax`` over an axis other than the last, as its own reductions (the ``standard``
flavour: ONNX Runtime, TensorRT).

ONNX Runtime's CPU Softmax computes a non-last axis by transposing the axis last and back: 8.9 ms
for one ``[8, 16, 4, 2100]`` tensor (YOLOv8/11's DFL softmax at batch 8, 320 px), where the same
values as ``exp(x - max) / sum(exp(x - max))`` along the axis take 0.56 ms. That is the formula the
kernel computes, so the rewrite is exact up to rounding (3.6e-7 measured) and it keeps torch's
non-finite results: a row with a NaN or a +inf is NaN (``inf - inf``), an all ``-inf`` row is NaN.
OpenVINO runs the Softmax op faster than the reductions (1.4 ms against 1.7), so its flavour keeps it.

``softmax(x, dim, dtype=...)`` and ``log_softmax(x, dim, dtype=...)`` cast ``x`` first, as torch
does, in every flavour: torch.onnx's own translations cast the result, so an integer input reached
ONNX Runtime's LogSoftmax ("Type 'tensor(int32)' ... is invalid") and OpenVINO computed it in
integers (off by 0.49), and a half input was computed in half (off by 0.065 for torch's float32).
"""

from __future__ import annotations

from typing import Any

from onnx import TensorProto
from onnxscript import ir
from onnxscript import opset18 as op

from fxdeploy.lowering.onnx_translations._common import const

HALF = (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)


def softmax_standard(x: Any, dim: int, half_to_float: bool = False) -> Any:
    """``aten._softmax``."""
    if half_to_float and x.dtype in HALF:
        x = op.Cast(x, to=TensorProto.FLOAT)
    return _softmax(x, dim)


def softmax_int_standard(x: Any, dim: int, dtype: int | None = None) -> Any:
    """``aten.softmax.int``: ``dtype`` (an ONNX type, as the exporter passes it) casts the input first, as in torch."""
    return _softmax(_cast(x, dtype), dim)


def softmax_int_openvino(x: Any, dim: int, dtype: int | None = None) -> Any:
    """``aten.softmax.int`` for OpenVINO: the cast first, then its Softmax op."""
    return _along(op.Softmax, _cast(x, dtype), dim)


def log_softmax_int(x: Any, dim: int, dtype: int | None = None) -> Any:
    """``aten.log_softmax.int`` (every flavour): the cast first, then LogSoftmax."""
    return _along(op.LogSoftmax, _cast(x, dtype), dim)


def _cast(x: Any, dtype: int | None) -> Any:
    return op.Cast(x, to=dtype) if dtype is not None and dtype != -1 else x


def _along(onnx_op: Any, x: Any, dim: int) -> Any:
    """``onnx_op`` (Softmax, LogSoftmax) along ``dim``; a scalar is its own 1-element axis (1, or 0 for
    the log; NaN for a NaN)."""
    shape = getattr(x, "shape", None)
    if shape is not None and len(shape) == 0:
        return op.Squeeze(onnx_op(op.Unsqueeze(x, const([0])), axis=0))
    return onnx_op(x, axis=dim)


def _softmax(x: Any, dim: int) -> Any:
    shape = getattr(x, "shape", None)
    if shape is None or len(shape) == 0 or dim % len(shape) == len(shape) - 1:
        return _along(op.Softmax, x, dim)  # rank unknown (as torch.onnx writes it), a scalar, or the last axis
    dims = len(shape)
    axis = dim % dims
    half = x.dtype in HALF  # computed in float32 and rounded once, as torch's CPU kernel accumulates
    if half:
        dtype, x = x.dtype, op.Cast(x, to=TensorProto.FLOAT)
    axes = const([axis])
    exp = op.Exp(op.Sub(x, op.ReduceMax(x, axes, keepdims=1)))
    out = op.Div(exp, op.ReduceSum(exp, axes, keepdims=1))
    return op.Cast(out, to=dtype) if half else out
