"""``fxdeploy::multiclass_nms`` as TensorRT's EfficientNMS_TRT plugin (TensorRT < 11).

The node uses the custom domain ``TRT`` (as ``g.op("TRT::EfficientNMS_TRT")`` exports have for
years): TensorRT's ONNX parser imports unknown ops as plugins by op type, and a custom domain keeps
``onnx.checker`` and ONNX shape inference valid. The plugin is not the spec, so the glue around it
closes the gaps it can and the rest are documented limits:

- outputs: num_detections [B, 1] int32 becomes num_dets [B] int64; classes become int64 labels;
  EfficientNMS pads with zeros, so labels and indices are set to -1 past num_dets;
- det_index is not a plugin output: it is recovered as the first box equal to the detected one
  (same coordinates and same score for its label);
- pre_top_k runs before the plugin, as in the standard flavour; NaN scores become -inf;
- limits: no per-class cap (max_output_boxes_per_class is ignored: the plugin only caps per
  image, at keep_top_k), and the plugin considers at most its top 4096 scores.
"""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
from onnx import TensorProto, defs
from onnxscript import BFLOAT16, DOUBLE, FLOAT, FLOAT16, INT64, values
from onnxscript import opset18 as op

from fxdeploy.lowering.onnx_translations._common import (
    const,
    dim,
    nan_to_neg_inf,
    pre_top_k_boxes,
    rank,
    static_dim,
    without_background,
)

TFloat = TypeVar("TFloat", FLOAT16, FLOAT, DOUBLE, BFLOAT16)
TRT_DOMAIN = "TRT"


def _efficient_nms_op() -> values.Op:
    """An onnxscript Op with a local schema; nothing is added to onnx's global schema registry."""
    param = defs.OpSchema.FormalParameter
    attr = defs.OpSchema.Attribute
    kind = defs.OpSchema.AttrType
    schema = defs.OpSchema(
        "EfficientNMS_TRT",
        TRT_DOMAIN,
        1,
        inputs=[param("boxes", "T"), param("scores", "T")],
        outputs=[
            param("num_detections", "tensor(int32)"),
            param("detection_boxes", "T"),
            param("detection_scores", "T"),
            param("detection_classes", "tensor(int32)"),
        ],
        type_constraints=[("T", ["tensor(float)", "tensor(float16)"], "boxes and scores")],
        attributes=[
            attr("score_threshold", kind.FLOAT, "", required=True),
            attr("iou_threshold", kind.FLOAT, "", required=True),
            attr("max_output_boxes", kind.INT, "", required=True),
            attr("background_class", kind.INT, "", required=True),
            attr("score_activation", kind.INT, "", required=True),
            attr("class_agnostic", kind.INT, "", required=True),
            attr("box_coding", kind.INT, "", required=True),
            attr("plugin_version", kind.STRING, "", required=True),
        ],
    )
    return values.Op(values.Opset(TRT_DOMAIN, 1), "EfficientNMS_TRT", schema)


def _recover_index(boxes: Any, scores: Any, det_boxes: Any, det_scores: Any, labels: Any, per_class_boxes: bool) -> Any:
    """[B, K] index of the first input box equal to each detection (same label's score too)."""
    label_rows = op.Unsqueeze(labels, const([2]))  # [B, K, 1]
    if per_class_boxes:  # per-class boxes: the detection's class slice, [B, K, N, 4]
        candidates = op.GatherND(op.Transpose(boxes, perm=[0, 2, 1, 3]), label_rows, batch_dims=1)
    else:
        candidates = op.Unsqueeze(boxes, const([1]))  # [B, 1, N, 4]
    same_box = op.ReduceMin(
        op.Cast(op.Equal(candidates, op.Unsqueeze(det_boxes, const([2]))), to=TensorProto.INT32),
        const([3]),
        keepdims=0,
    )
    label_scores = op.GatherND(op.Transpose(scores, perm=[0, 2, 1]), label_rows, batch_dims=1)
    same_score = op.Equal(label_scores, op.Unsqueeze(det_scores, const([2])))
    match = op.Mul(same_box, op.Cast(same_score, to=TensorProto.INT32))
    return op.ArgMax(match, axis=2, keepdims=0)


def multiclass_nms_efficient_trt(
    boxes: TFloat,
    scores: TFloat,
    iou_threshold: float,
    score_threshold: float,
    max_output_boxes_per_class: int,
    pre_top_k: int,
    keep_top_k: int,
    background_label_id: int,
    class_agnostic: bool,
) -> tuple[TFloat, TFloat, INT64, INT64, INT64]:
    del max_output_boxes_per_class  # not expressible with this plugin (module docstring)
    s = nan_to_neg_inf(op.Cast(scores, to=TensorProto.FLOAT))  # the plugin drops the background
    b = op.Cast(boxes, to=TensorProto.FLOAT)
    chosen = None
    static_n = static_dim(scores, 1)
    if pre_top_k > 0 and (static_n is None or pre_top_k < static_n):
        ranking = without_background(scores, dim(scores, 2), background_label_id)
        chosen = pre_top_k_boxes(ranking, pre_top_k, dim(scores, 1))
        s = op.GatherND(s, op.Unsqueeze(chosen, const([2])), batch_dims=1)
        b = op.GatherND(b, op.Unsqueeze(chosen, const([2])), batch_dims=1)
    count, det_boxes, det_scores, classes = _efficient_nms_op()(
        b,
        s,
        score_threshold=score_threshold,
        iou_threshold=iou_threshold,
        max_output_boxes=keep_top_k,
        background_class=background_label_id,
        score_activation=0,
        class_agnostic=int(class_agnostic),
        box_coding=0,
        plugin_version="1",
    )
    num_dets = op.Cast(op.Squeeze(count, const([1])), to=TensorProto.INT64)
    positions = op.Unsqueeze(op.Range(const(0), const(keep_top_k), const(1)), const([0]))
    filled = op.Less(positions, op.Unsqueeze(num_dets, const([1])))
    labels = op.Where(filled, op.Cast(classes, to=TensorProto.INT64), const(-1))
    index = _recover_index(b, s, det_boxes, det_scores, op.Max(labels, const(0)), rank(boxes) == 4)
    if chosen is not None:
        index = op.GatherElements(chosen, index, axis=1)
    index = op.Where(filled, index, const(-1))
    return (
        op.CastLike(op.Where(op.Unsqueeze(filled, const([2])), det_boxes, const(0.0, np.float32)), boxes),
        op.CastLike(op.Where(filled, det_scores, const(0.0, np.float32)), scores),
        labels,
        num_dets,
        index,
    )
