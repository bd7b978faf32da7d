"""``fxdeploy::multiclass_nms`` as standard ONNX: one NonMaxSuppression plus a padding subgraph.

Only standard opset-18 ops (no Loop, If or Unique), so ONNX Runtime, OpenVINO and TensorRT's
parser all take it. After NonMaxSuppression selects M triples, only three things touch all M:
a flat score gather, a [B, M + K] score matrix (one row per image, -inf outside it; K spare
columns keep TopK's static K valid) and one TopK of K per row. Everything else, decoding the
label, box and index, runs on the B x K winners. This keeps the subgraph within a few percent
of the NonMaxSuppression node itself (benchmarks/nms_bench.py).

Score ties are broken by position in the TopK row, i.e. in NonMaxSuppression's output order.
Runtimes emit (batch, class, visiting order), which is the spec's (class, then box) tie rule.
Class-agnostic NMS visits pairs box-major, so there the list is re-sorted to class-major first;
it holds at most B * max_output_boxes_per_class triples.
"""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
from onnx import TensorProto
from onnxscript import BFLOAT16, DOUBLE, FLOAT, FLOAT16, INT64
from onnxscript import opset18 as op

from fxdeploy.lowering.onnx_translations._common import (
    NEG_INF,
    const,
    dim,
    pre_top_k_boxes,
    rank,
    static_dim,
    without_background,
)

TFloat = TypeVar("TFloat", FLOAT16, FLOAT, DOUBLE, BFLOAT16)


def _nms_layout(
    boxes: Any, scores: Any, num_boxes: Any, num_classes: Any, *, agnostic: bool, per_class: bool, single: bool
) -> tuple[Any, Any]:
    """Boxes [B', N', 4] and scores [B', C', N'] in the layout NonMaxSuppression reads.

    - shared boxes, per class: as is (scores transposed);
    - boxes per class [B, N, C, 4]: one NMS "batch" row per (image, class), B' = B*C;
    - class-agnostic: one class whose N*C elements are the (box, class) pairs (n * C + c), so a
      box suppresses across labels exactly as in the reference.
    """
    if agnostic:
        if not per_class and not single:
            shape = op.Concat(op.Shape(boxes, end=2), num_classes, const([4]), axis=0)
            boxes = op.Expand(op.Unsqueeze(boxes, const([2])), shape)
        return op.Reshape(boxes, const([0, -1, 4])), op.Reshape(scores, const([0, 1, -1]))
    if per_class:
        boxes = op.Reshape(op.Transpose(boxes, perm=[0, 2, 1, 3]), op.Concat(const([-1]), num_boxes, const([4]), axis=0))
        rows = op.Concat(const([-1, 1]), num_boxes, axis=0)
        return boxes, op.Reshape(op.Transpose(scores, perm=[0, 2, 1]), rows)
    return boxes, op.Transpose(scores, perm=[0, 2, 1])


def _columns(triples: Any, axis: int) -> tuple[Any, Any, Any]:
    """(row, class, element) columns of NonMaxSuppression triples, without the last axis."""
    parts = op.Split(triples, axis=axis, num_outputs=3)
    return tuple(op.Squeeze(p, const([axis])) for p in parts)  # type: ignore[return-value]


def _decode(
    triples: Any, axis: int, num_classes: Any, *, agnostic: bool, per_class: bool
) -> tuple[Any, Any, Any]:
    """(image, label, local box index) of triples laid out along ``axis``."""
    row, cls, element = _columns(triples, axis)
    classes = op.Squeeze(num_classes, const([0]))
    if agnostic:
        return row, op.Mod(element, classes), op.Div(element, classes)
    if per_class:
        return op.Div(row, classes), op.Mod(row, classes), element
    return row, cls, element


def _class_major(selected: Any, score: Any, num_classes: Any, num_boxes: Any) -> tuple[Any, Any]:
    """Class-agnostic only: reorder triples by (image, label, box) so TopK ties go by class."""
    image, label, local = _decode(selected, 1, num_classes, agnostic=True, per_class=False)
    key = op.Add(op.Mul(op.Add(op.Mul(image, num_classes), label), num_boxes), local)
    _, order = op.TopK(key, op.Shape(key), axis=0, largest=0, sorted=1)
    return op.Gather(selected, order, axis=0), op.Gather(score, order, axis=0)


def multiclass_nms_standard(
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
    per_class = rank(boxes) == 4
    num_boxes, num_classes = dim(scores, 1), dim(scores, 2)
    s = without_background(scores, num_classes, background_label_id)
    b = op.Cast(boxes, to=TensorProto.FLOAT)
    chosen = None
    static_n = static_dim(scores, 1)
    if pre_top_k > 0 and (static_n is None or pre_top_k < static_n):
        chosen = pre_top_k_boxes(s, pre_top_k, num_boxes)
        s = op.GatherND(s, op.Unsqueeze(chosen, const([2])), batch_dims=1)
        b = op.GatherND(b, op.Unsqueeze(chosen, const([2])), batch_dims=1)
        num_boxes = op.Shape(chosen, start=1, end=2)
    single = static_dim(scores, 2) == 1
    nms_boxes, nms_scores = _nms_layout(
        b, s, num_boxes, num_classes, agnostic=class_agnostic, per_class=per_class, single=single
    )
    selected = op.NonMaxSuppression(
        nms_boxes,
        nms_scores,
        const([max_output_boxes_per_class]),
        const([iou_threshold], np.float32),
        const([score_threshold], np.float32),
        center_point_box=0,
    )
    # The only work on all M selected triples: their scores and images, then one TopK per image.
    row, cls, element = _columns(selected, axis=1)
    layout = op.Shape(nms_scores, start=1, end=3)  # [C', N']
    nms_classes, nms_boxes_n = op.Split(layout, num_outputs=2)
    flat = op.Add(op.Mul(op.Add(op.Mul(row, nms_classes), cls), nms_boxes_n), element)
    score = op.Gather(op.Reshape(nms_scores, const([-1])), flat, axis=0)
    if class_agnostic:
        selected, score = _class_major(selected, score, num_classes, num_boxes)
        row = op.Squeeze(op.Split(selected, axis=1, num_outputs=3)[0], const([1]))
    image = op.Div(row, op.Squeeze(num_classes, const([0]))) if per_class and not class_agnostic else row
    owner = op.Unsqueeze(op.Concat(image, const(np.full(keep_top_k, -1)), axis=0), const([0]))
    images = op.Unsqueeze(op.Range(const(0), op.Squeeze(dim(scores, 0), const([0])), const(1)), const([1]))
    neg_inf = const(NEG_INF, np.float32)
    padded = op.Unsqueeze(op.Concat(score, const(np.zeros(keep_top_k), np.float32), axis=0), const([0]))
    matrix = op.Where(op.Equal(owner, images), padded, neg_inf)
    top_scores, position = op.TopK(matrix, const([keep_top_k]), axis=1, largest=1, sorted=1)
    filled = op.Greater(top_scores, neg_inf)
    # Decode the B x K winners only.
    winners = op.Gather(op.Concat(selected, const(np.zeros((keep_top_k, 3))), axis=0), position, axis=0)
    _, label, local = _decode(winners, 2, num_classes, agnostic=class_agnostic, per_class=per_class)
    w_row, _, w_element = _columns(winners, axis=2)
    box = op.Gather(op.Reshape(nms_boxes, const([-1, 4])), op.Add(op.Mul(w_row, nms_boxes_n), w_element), axis=0)
    index = local if chosen is None else op.GatherElements(chosen, local, axis=1)
    minus_one = const(-1)
    return (
        op.CastLike(op.Where(op.Unsqueeze(filled, const([2])), box, const(0.0, np.float32)), boxes),
        op.CastLike(op.Where(filled, top_scores, const(0.0, np.float32)), scores),
        op.Where(filled, label, minus_one),
        op.ReduceSum(op.Cast(filled, to=TensorProto.INT64), const([1]), keepdims=0),
        op.Where(filled, index, minus_one),
    )
