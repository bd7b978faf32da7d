"""onnxscript translations of fxdeploy's ops for ``torch.onnx.export(dynamo=True)``.

``translation_table(flavour)`` is passed as ``custom_translation_table``. The table is an explicit
dict built on request: importing this package registers nothing anywhere.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import torch

import fxdeploy.ops  # noqa: F401  (defines torch.ops.fxdeploy.*)

FLAVOURS = ("standard", "openvino", "tensorrt", "efficient_nms_trt")
UNORDERED_TIES = ("tensorrt", "efficient_nms_trt")
"""The flavours for TensorRT, whose TopK promises no order among equal values: ``aten.topk`` and a
sort (stable or not: lower()'s check ran ONNX's index order) are written with TopKs whose
result does not depend on it (``topk.py``)."""


def translation_table(flavour: str = "standard") -> dict[torch._ops.OpOverload | Callable, Callable]:
    """Map fxdeploy ops to their ONNX translations.

    - ``standard``: ONNX NonMaxSuppression + padding subgraph (ONNX Runtime, TensorRT); a softmax
      over a non-last axis as its reductions (``softmax.py``: ONNX Runtime's kernel transposes).
      Every flavour casts a softmax's or log-softmax's ``dtype`` first, as torch does (``softmax.py``).
    - ``openvino``: the same graph with the IoU threshold one float32 step up, because OpenVINO
      suppresses at IoU == threshold where the contract does not; ``aten.topk`` without a stable
      TopK over its whole axis (``topk.py``); ``>`` and ``>=`` as ``Less`` and ``LessOrEqual`` with
      the operands swapped (``comparisons.py``: OpenVINO's ``Greater`` is true beside a NaN).
    - ``tensorrt``: the standard graph, with ``aten.topk`` and a stable sort independent of the
      order TensorRT's TopK leaves ties in (``topk.py``).
    - ``efficient_nms_trt``: the same, with TensorRT's EfficientNMS_TRT plugin (TensorRT < 11 only).
    Every flavour writes shifts of unsigned integers as BitShift (``shifts.py``), and ``atan2`` and a real
    ``angle`` with torch's signed zeros, infinities and NaNs (``atan2.py``), and ``histc`` with torch's bin
    rule (``histc.py``), ``logsigmoid`` without the log of a sigmoid rounded to 0 or 1 (``log_sigmoid.py``), and
    ``hypot``, ``fmax``/``fmin`` and a stable ``sort``, which torch.onnx lacks (``hypot.py``, ``fmax.py``, ``sort.py``),
    and floor division and remainder with torch's values (``division.py``; on OpenVINO for integers only,
    int32 and int64 without its float32 ``Div``, ``Mod`` and ``BitShift``, signed shifts too: ``exact_integers.py``),
    a size's ``//`` with Python's floor (``division.py``), and ``roll`` by a shift read from a size (``roll.py``).
    nms and batched_nms (data-dependent; normally rewritten by substitute_nms first) lower to
    NonMaxSuppression in both.
    """
    from fxdeploy.lowering.onnx_translations.nms import batched_nms_standard, nms_standard

    if flavour in ("standard", "tensorrt"):
        from fxdeploy.lowering.onnx_translations.multiclass_nms import multiclass_nms_standard

        multiclass = multiclass_nms_standard
    elif flavour == "openvino":
        from fxdeploy.lowering.onnx_translations.multiclass_nms import multiclass_nms_openvino

        multiclass = multiclass_nms_openvino
    elif flavour == "efficient_nms_trt":
        from fxdeploy.lowering.onnx_translations.efficient_nms_trt import multiclass_nms_efficient_trt

        multiclass = multiclass_nms_efficient_trt
    else:
        raise ValueError(f"translation_table: unknown flavour {flavour!r}; known: {list(FLAVOURS)}")
    table = {
        torch.ops.fxdeploy.multiclass_nms.default: multiclass,
        torch.ops.fxdeploy.nms.default: nms_standard,
        torch.ops.fxdeploy.batched_nms.default: batched_nms_standard,
    }
    table.update(_aten_translations(flavour))
    if flavour == "openvino" or flavour in UNORDERED_TIES:
        from fxdeploy.lowering.onnx_translations import topk

        table[torch.ops.aten.topk.default] = topk.topk_any_tie_order
        if flavour in UNORDERED_TIES:  # OpenVINO's reader keeps a sort's TopK stable
            table[torch.ops.aten.sort.stable] = topk.sort_stable_any_tie_order
            table[torch.ops.aten.sort.default] = topk.sort_any_tie_order
    return table


def _aten_translations(flavour: str) -> dict[torch._ops.OpOverload | Callable, Callable]:
    """fxdeploy's translations of aten ops where torch.onnx's compute other values (the docstring above)."""
    from fxdeploy.lowering.onnx_translations import division, shifts
    from fxdeploy.lowering.onnx_translations.atan2 import angle, atan2
    from fxdeploy.lowering.onnx_translations.fmax import fmax, fmin
    from fxdeploy.lowering.onnx_translations.histc import histc
    from fxdeploy.lowering.onnx_translations.hypot import hypot
    from fxdeploy.lowering.onnx_translations.log_sigmoid import log_sigmoid
    from fxdeploy.lowering.onnx_translations.roll import roll
    from fxdeploy.lowering.onnx_translations.softmax import (
        log_softmax_int,
        softmax_int_openvino,
        softmax_int_standard,
        softmax_standard,
    )
    from fxdeploy.lowering.onnx_translations.sort import sort_stable

    aten = torch.ops.aten
    table: dict[torch._ops.OpOverload | Callable, Callable] = {
        aten.softmax.int: softmax_int_openvino if flavour == "openvino" else softmax_int_standard,
        aten.log_softmax.int: log_softmax_int,
        aten.atan2.default: atan2,
        aten.angle.default: angle,
        aten.histc.default: histc,
        aten.log_sigmoid.default: log_sigmoid,
        aten.hypot.default: hypot,
        aten.fmax.default: fmax,
        aten.fmin.default: fmin,
        aten.sort.stable: sort_stable,
        aten.roll.default: roll,
        operator.floordiv: division.size_floor_divide,  # a size's //: ONNX's integer Div truncates
    }
    suffix = "_openvino" if flavour == "openvino" else ""  # OpenVINO's Mod is not C's fmod (division.py)
    for overloads, name in (((aten.floor_divide.default, aten.floor_divide.Scalar), "floor_divide"),
                            ((aten.div.Tensor_mode, aten.div.Scalar_mode), "div_mode"),
                            ((aten.remainder.Tensor, aten.remainder.Scalar), "remainder")):
        for overload in overloads:
            table[overload] = getattr(division, name + suffix)
    if flavour != "openvino":
        table[aten._softmax.default] = softmax_standard
    else:  # OpenVINO's Greater is true beside a NaN on AVX-512 CPUs (comparisons.py)
        from fxdeploy.lowering.onnx_translations.comparisons import greater, greater_equal

        for overload in (aten.gt.Tensor, aten.gt.Scalar):
            table[overload] = greater
        for overload in (aten.ge.Tensor, aten.ge.Scalar):
            table[overload] = greater_equal
        table[aten.fmod.Tensor] = table[aten.fmod.Scalar] = division.fmod_openvino  # its integer Mod is float32's
    for overload in (aten.__lshift__.Scalar, aten.__lshift__.Tensor, aten.bitwise_left_shift.Tensor,
                     aten.bitwise_left_shift.Tensor_Scalar):
        table[overload] = shifts.left_shift_openvino if flavour == "openvino" else shifts.left_shift
    for overload in (aten.__rshift__.Scalar, aten.__rshift__.Tensor, aten.bitwise_right_shift.Tensor,
                     aten.bitwise_right_shift.Tensor_Scalar):
        table[overload] = shifts.right_shift_openvino if flavour == "openvino" else shifts.right_shift
    return table
