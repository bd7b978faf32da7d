"""onnxscript translations of fxdeploy's ops for ``torch.onnx.export(dynamo=True)``.

``translation_table(flavour)`` is passed as ``custom_translation_table``. The table is an explicit
dict built on request: importing this package registers nothing anywhere.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

import fxdeploy.ops  # noqa: F401  (defines torch.ops.fxdeploy.*)

FLAVOURS = ("standard", "efficient_nms_trt")


def translation_table(flavour: str = "standard") -> dict[torch._ops.OpOverload, Callable]:
    """Map fxdeploy ops to their ONNX translations.

    - ``standard``: ONNX NonMaxSuppression + padding subgraph (ONNX Runtime, OpenVINO, TensorRT).
    - ``efficient_nms_trt``: TensorRT's EfficientNMS_TRT plugin (TensorRT < 11 only).
    """
    if flavour == "standard":
        from fxdeploy.lowering.onnx_translations.multiclass_nms import multiclass_nms_standard

        nms = multiclass_nms_standard
    elif flavour == "efficient_nms_trt":
        from fxdeploy.lowering.onnx_translations.efficient_nms_trt import multiclass_nms_efficient_trt

        nms = multiclass_nms_efficient_trt
    else:
        raise ValueError(f"translation_table: unknown flavour {flavour!r}; known: {list(FLAVOURS)}")
    return {torch.ops.fxdeploy.multiclass_nms.default: nms}
