"""``fxdeploy::multiclass_nms`` as standard ONNX: one NonMaxSuppression plus a padding subgraph.

Only standard opset-18 ops (no Loop, If or Unique), so ONNX Runtime, OpenVINO and TensorRT's
parser all take it. After NonMaxSuppression selects M triples, the subgraph is a handful of
element-wise ops and gathers over M, then per image a [B, M + K] score matrix (a finite floor
outside the image, never -inf: ``_common.LOWEST``; K spare columns keep TopK's static K valid) and
one TopK of K per row. No sort of all M,
no work over the B x N x C scores besides the transpose NonMaxSuppression needs, so it costs a
few percent of the NonMaxSuppression node itself (benchmarks/nms_bench.py).

NonMaxSuppression reads each score's rank, not the score: runtimes visit equal scores in their own
order (ONNX Runtime's heap does not keep the box order), and the spec visits the lower box first.
One TopK per NMS row gives the ranks (ONNX's TopK puts the lower index first among equals); the
scores themselves are gathered back after. Merge ties are broken by position in the TopK row,
i.e. in NonMaxSuppression's output order: runtimes emit (batch, class, visiting order), which is
the spec's (class, then box) tie rule.
Class-agnostic NMS visits pairs box-major, so there the list is re-sorted to class-major first;
it holds at most B * max_output_boxes_per_class triples. Otherwise NonMaxSuppression keeps at
most keep_top_k boxes per class (``effective_cap``), which cannot change the K output rows.

Where NMS cannot suppress anything (iou_threshold >= 1, the cap not binding), there is no
NonMaxSuppression node at all: ``threshold_only`` ranks the candidates with one TopK.
"""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
from onnx import TensorProto, numpy_helper
from onnxscript import BFLOAT16, DOUBLE, FLOAT, FLOAT16, INT64
from onnxscript import opset18 as op

from fxdeploy.lowering.onnx_translations import threshold_only
from fxdeploy.lowering.onnx_translations._common import (
    INT32_SQUARE_ROOT,
    below_candidates,
    const,
    descending_order,
    descending_positions,
    dim,
    dim_bound,
    padded_outputs,
    pre_top_k_boxes,
    rank,
    static_dim,
    without_background,
)
from fxdeploy.ops.reference import effective_cap

TFloat = TypeVar("TFloat", FLOAT16, FLOAT, DOUBLE, BFLOAT16)


def _nms_layout(
    boxes: Any,
    scores: Any,
    sizes: tuple[Any, Any, Any],
    *,
    agnostic: bool,
    per_class: bool,
    single: bool,
) -> tuple[Any, Any]:
    """Boxes [B', N', 4] and scores [B', C', N'] in the layout NonMaxSuppression reads.

    - shared boxes, per class: as is (scores transposed);
    - boxes per class [B, N, C, 4]: one NMS "batch" row per (image, class), B' = B*C;
    - class-agnostic: one class whose N*C elements are the (box, class) pairs (n * C + c), so a
      box suppresses across labels exactly as in the reference.
    Shapes are spelled out (no -1) and allow zeros, so that N = 0 still reshapes.
    """
    batch, num_boxes, num_classes = sizes
    four, one = const([4]), const([1])
    if agnostic:
        pairs = op.Mul(num_boxes, num_classes)
        if not per_class and not single:
            expanded = op.Concat(batch, num_boxes, num_classes, four, axis=0)
            boxes = op.Expand(op.Unsqueeze(boxes, const([2])), expanded)
        box_shape, score_shape = op.Concat(batch, pairs, four, axis=0), op.Concat(batch, one, pairs, axis=0)
        return op.Reshape(boxes, box_shape, allowzero=1), op.Reshape(scores, score_shape, allowzero=1)
    if per_class:
        rows = op.Mul(batch, num_classes)
        boxes = op.Transpose(boxes, perm=[0, 2, 1, 3])
        boxes = op.Reshape(boxes, op.Concat(rows, num_boxes, four, axis=0), allowzero=1)
        scores = op.Transpose(scores, perm=[0, 2, 1])
        scores = op.Reshape(scores, op.Concat(rows, one, num_boxes, axis=0), allowzero=1)
        return boxes, scores
    return boxes, op.Transpose(scores, perm=[0, 2, 1])


def _node_iou_threshold(iou_threshold: float) -> np.float32:
    """The threshold given to NonMaxSuppression.

    The spec suppresses at IoU > t. OpenVINO suppresses at IoU >= t, so at t = 0 it would drop
    every box that merely coexists with a kept one. Passing FLT_MIN instead of 0 fixes that and
    changes nothing for ``>`` kernels (ONNX Runtime): no IoU lies in (0, FLT_MIN]. (t = 1 cannot
    get the same treatment: ONNX Runtime rejects thresholds above 1.) Elsewhere OpenVINO still
    differs at IoU == t exactly.
    """
    threshold = np.float32(iou_threshold)
    return np.finfo(np.float32).tiny if threshold == 0 else threshold


def _row_length(scores: Any, pre_top_k: int, agnostic: bool) -> int | None:
    """N' of NonMaxSuppression's score rows, where static: N boxes (at most pre_top_k), times C
    classes when class-agnostic; None where unknown."""
    boxes, classes = static_dim(scores, 1), static_dim(scores, 2)
    if pre_top_k > 0:
        boxes = pre_top_k if boxes is None else min(boxes, pre_top_k)
    if agnostic:
        return None if boxes is None or classes is None else boxes * classes
    return boxes


def _ranks(scores: Any, score_threshold: float, row_length: int | None) -> Any:
    """Scores [B', C', N'] as tie-free keys in the same order: N' - rank along N', where rank
    orders by descending score and then ascending index; non-candidates (score <= threshold) -1,
    below NonMaxSuppression's threshold of 0 whether a runtime keeps scores > or >= it (OpenVINO).
    The TopK sees non-candidates at ``below_candidates``, not -inf (``_common.LOWEST``).
    ``row_length``: N' where static (the rank then needs no stable TopK)."""
    count = op.Shape(scores, start=2, end=3)
    # NaN never is a candidate; OpenVINO's CPU Greater says NaN > t, so NaN is tested apart
    candidate = op.And(op.Greater(scores, const(np.float32(score_threshold), np.float32)), op.Not(op.IsNaN(scores)))
    floor = const(below_candidates(score_threshold), np.float32)
    clean = op.Where(candidate, scores, floor)  # no NaN for TopK to place, and no -inf
    if row_length is not None and row_length <= INT32_SQUARE_ROOT:
        rank = descending_positions(clean, count, axis=2)
    else:  # one TopK, stable (as ONNX's is; OpenVINO's executor asks for it)
        _, order = op.TopK(clean, count, axis=2, largest=1, sorted=1)
        positions = op.Expand(op.Range(const(0), op.Squeeze(count, const([0])), const(1)), op.Shape(order))
        zeros = op.ConstantOfShape(op.Shape(order), value=numpy_helper.from_array(np.zeros(1, np.int64)))
        rank = op.ScatterElements(zeros, order, positions, axis=2)
    keys = op.Cast(op.Sub(count, rank), to=TensorProto.FLOAT)
    return op.Where(candidate, keys, const(-1.0, np.float32))


def _unsqueezed(*columns: Any) -> Any:
    """[M, k] from k columns of length M."""
    return op.Concat(*(op.Unsqueeze(c, const([1])) for c in columns), axis=1)


def _class_major(key: Any, *columns: Any) -> tuple[Any, ...]:
    """Class-agnostic only: reorder rows by (image, label, box) so TopK ties go by class."""
    _, order = op.TopK(key, op.Shape(key), axis=0, largest=0, sorted=1)
    return tuple(op.Gather(c, order, axis=0) for c in columns)


def _candidates(scores: Any, boxes: Any, pre_top_k: int, background_label_id: int) -> tuple[Any, Any, Any, Any]:
    """float32 scores (background at -inf) and boxes, cut to the pre_top_k boxes when asked.

    Returns (scores, boxes, number of boxes kept, chosen box indices [B, k] or None).
    """
    num_boxes = dim(scores, 1)
    s = without_background(scores, dim(scores, 2), background_label_id)
    b = op.Cast(boxes, to=TensorProto.FLOAT)
    static_n = static_dim(scores, 1)
    if pre_top_k <= 0 or (static_n is not None and pre_top_k >= static_n):
        return s, b, num_boxes, None
    chosen = pre_top_k_boxes(s, pre_top_k, num_boxes)
    rows = op.Unsqueeze(chosen, const([2]))
    return (
        op.GatherND(s, rows, batch_dims=1),
        op.GatherND(b, rows, batch_dims=1),
        op.Shape(chosen, start=1, end=2),
        chosen,
    )


def _decode(
    selected: Any, nms_scores: Any, num_classes: Any, *, agnostic: bool, per_class: bool
) -> tuple[Any, Any, Any, Any]:
    """(image, label, local box index, score) of each selected [row, class, element]."""
    row, cls, element = (op.Squeeze(c, const([1])) for c in op.Split(selected, axis=1, num_outputs=3))
    nms_classes, nms_n = op.Split(op.Shape(nms_scores, start=1, end=3), num_outputs=2)
    flat = op.Add(op.Mul(op.Add(op.Mul(row, nms_classes), cls), nms_n), element)
    score = op.Gather(op.Reshape(nms_scores, const([-1])), flat)
    classes = op.Squeeze(num_classes, const([0]))
    if agnostic:
        return row, op.Mod(element, classes), op.Div(element, classes), score
    if per_class:
        return op.Div(row, classes), op.Mod(row, classes), element, score
    return row, cls, element, score


def _merge_length(scores: Any, pre_top_k: int, cap: int, agnostic: bool, keep_top_k: int) -> int | None:
    """M + K, the merge matrix's row length, bounded where B, N and C are static or bounded (a
    dynamic batch has the maximum its dynamic shapes give): NonMaxSuppression selects each
    (box, class) pair at most once, and at most ``cap`` of each (image, class) group (one group
    an image where class-agnostic)."""
    batch, boxes, classes = (dim_bound(scores, axis) for axis in range(3))
    if batch is None or boxes is None or classes is None:
        return None
    if pre_top_k > 0:
        boxes = min(boxes, pre_top_k)
    groups = batch if agnostic else batch * classes
    return min(batch * boxes * classes, groups * cap) + keep_top_k


def _top_k_per_image(
    image: Any, score: Any, table: Any, boxes: Any, batch: Any, keep_top_k: int, tie_free: bool, floor: float
) -> tuple[Any, Any, Any, Any, Any]:
    """Spec steps 4-5: a [B, M + K] score matrix (``floor``, below every selected score, outside the
    row's image), TopK K per row, then padding; a row's slot is filled where its column is the
    image's. ``table`` [M, 3] holds (label, box index, row in ``boxes`` [R, 4]); boxes are
    only gathered for the B x K winners, from ``boxes`` plus one zero row (row -1).
    ``tie_free``: the row length is known to be at most INT32_SQUARE_ROOT, so the order comes
    from ``descending_order`` rather than a stable TopK."""
    owner = op.Unsqueeze(op.Concat(image, const(np.full(keep_top_k, -1)), axis=0), const([0]))
    images = op.Unsqueeze(op.Range(const(0), op.Squeeze(batch, const([0])), const(1)), const([1]))
    padded = op.Unsqueeze(op.Concat(score, const(np.zeros(keep_top_k), np.float32), axis=0), const([0]))
    matrix = op.Where(op.Equal(owner, images), padded, const(floor, np.float32))
    if tie_free:
        position = descending_order(matrix, op.Shape(matrix, start=1, end=2), 1, const([keep_top_k]))
        top_scores = op.GatherElements(matrix, position, axis=1)
    else:
        top_scores, position = op.TopK(matrix, const([keep_top_k]), axis=1, largest=1, sorted=1)
    filled = op.Equal(op.Gather(op.Squeeze(owner, const([0])), position, axis=0), images)
    winners = op.Gather(op.Concat(table, const(np.full((keep_top_k, 3), -1)), axis=0), position, axis=0)
    label, index, box_row = (op.Squeeze(c, const([2])) for c in op.Split(winners, axis=2, num_outputs=3))
    return padded_outputs(filled, boxes, box_row, top_scores, label, index)


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
    batch, num_classes = dim(scores, 0), dim(scores, 2)
    s, b, num_boxes, chosen = _candidates(scores, boxes, pre_top_k, background_label_id)
    single = static_dim(scores, 2) == 1
    if threshold_only.applies(
        iou_threshold, max_output_boxes_per_class, keep_top_k, class_agnostic, scores, pre_top_k
    ):
        det_boxes, det_scores, det_labels, num_dets, det_index = threshold_only.threshold_and_rank(
            s, b, num_boxes, chosen, batch, num_classes, score_threshold, keep_top_k, per_class, single,
            threshold_only.static_pairs(scores, pre_top_k),
        )
        return op.CastLike(det_boxes, boxes), op.CastLike(det_scores, scores), det_labels, num_dets, det_index
    sizes = (batch, num_boxes, num_classes)
    nms_boxes, nms_scores = _nms_layout(b, s, sizes, agnostic=class_agnostic, per_class=per_class, single=single)
    cap = effective_cap(max_output_boxes_per_class, keep_top_k, class_agnostic)
    selected = op.NonMaxSuppression(
        nms_boxes,
        _ranks(nms_scores, score_threshold, _row_length(scores, pre_top_k, class_agnostic)),
        const([cap]),
        const([_node_iou_threshold(iou_threshold)], np.float32),
        const([0.0], np.float32),  # ranks of candidates are >= 1
        center_point_box=0,
    )
    image, label, local, score = _decode(
        selected, nms_scores, num_classes, agnostic=class_agnostic, per_class=per_class
    )
    index = local if chosen is None else op.GatherND(chosen, _unsqueezed(image, local))
    box_row = op.Add(op.Mul(image, num_boxes), local)  # row of b [B, N, 4] or [B, N, C, 4] flattened
    if per_class:
        box_row = op.Add(op.Mul(box_row, num_classes), label)
    table = _unsqueezed(label, index, box_row)  # [M, 3] int64: one gather serves all three
    if class_agnostic:
        key = op.Add(op.Mul(op.Add(op.Mul(image, num_classes), label), num_boxes), local)
        image, score, table = _class_major(key, image, score, table)
    length = _merge_length(scores, pre_top_k, cap, class_agnostic, keep_top_k)
    det_boxes, det_scores, det_labels, num_dets, det_index = _top_k_per_image(
        image, score, table, op.Reshape(b, const([-1, 4])), batch, keep_top_k,
        tie_free=length is not None and length <= INT32_SQUARE_ROOT, floor=below_candidates(score_threshold),
    )
    return op.CastLike(det_boxes, boxes), op.CastLike(det_scores, scores), det_labels, num_dets, det_index


def multiclass_nms_openvino(
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
    """The standard graph with the IoU threshold one float32 step higher.

    OpenVINO's NonMaxSuppression suppresses at IoU >= t where the contract (and ONNX) suppress
    only at IoU > t. Below 1, no float32 IoU lies strictly between t and the next float32 up, so
    OpenVINO then makes exactly the contract's decisions. At t = 1, where no NonMaxSuppression
    node could, the graph has none (``threshold_only``), unless a class-agnostic cap may bind;
    then identical boxes are affected, which there includes one box's pairs with other classes.
    """
    threshold = float(iou_threshold)
    if 0.0 < threshold < 1.0:
        threshold = float(np.nextafter(np.float32(threshold), np.float32(2.0)))
    return multiclass_nms_standard(
        boxes, scores, threshold, score_threshold, max_output_boxes_per_class, pre_top_k, keep_top_k,
        background_label_id, class_agnostic,
    )
