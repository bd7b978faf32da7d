"""``multiclass_nms`` where NMS cannot suppress anything: threshold, rank, pad; no NonMaxSuppression.

The contract suppresses a box only at IoU > iou_threshold, and an IoU is at most 1 (float32 too:
the intersection's sides are never longer than either box's), so with iou_threshold >= 1 greedy
NMS keeps every candidate up to the per-class cap. Detection heads that already rank their
queries (DETR, RT-DETR, YOLOS) use multiclass_nms exactly so, to threshold and pad. Then the
whole operator is one TopK over the candidate scores, class-major so that TopK's tie rule (lower
index first) is the spec's (lower class, then lower box): far less work than NonMaxSuppression
and its decoding, and exact on every runtime, OpenVINO included (its NMS suppresses at IoU == 1).

The cap must not bind for this to hold, which ``applies`` checks from static facts only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto
from onnxscript import opset18 as op

from fxdeploy.lowering.onnx_translations._common import (
    below_candidates,
    const,
    nan_to_neg_inf,
    padded_outputs,
    static_dim,
)


def applies(
    iou_threshold: float,
    max_output_boxes_per_class: int,
    keep_top_k: int,
    class_agnostic: bool,
    scores: Any,
    pre_top_k: int,
) -> bool:
    """True where the result is NMS's: nothing is suppressed and the per-class cap cannot bind.

    Per class, a cap of at least keep_top_k cannot change the K rows (ops.reference.effective_cap).
    Class-agnostic groups break score ties by box where the output breaks them by class, so there
    the cap must cover every (box, class) pair, which needs static N and C.
    """
    if not iou_threshold >= 1.0:  # also False for NaN
        return False
    if not class_agnostic and max_output_boxes_per_class >= keep_top_k:
        return True
    num_boxes, num_classes = static_dim(scores, 1), static_dim(scores, 2)
    if num_boxes is None or num_classes is None:
        return False
    if pre_top_k > 0:
        num_boxes = min(num_boxes, pre_top_k)
    pairs = num_boxes * num_classes if class_agnostic else num_boxes
    return max_output_boxes_per_class >= pairs


def static_pairs(scores: Any, pre_top_k: int) -> int | None:
    """How many (box, class) pairs TopK ranks, where N and C are static: N (or pre_top_k) times C."""
    num_boxes, num_classes = static_dim(scores, 1), static_dim(scores, 2)
    if num_boxes is None or num_classes is None:
        return None
    return (min(num_boxes, pre_top_k) if pre_top_k > 0 else num_boxes) * num_classes


def threshold_and_rank(
    s: Any, b: Any, num_boxes: Any, chosen: Any, batch: Any, num_classes: Any,
    score_threshold: float, keep_top_k: int, per_class: bool, single: bool, known_pairs: int | None = None,
) -> tuple[Any, Any, Any, Any, Any]:
    """The five outputs from the candidates ``_candidates`` gives: scores ``s`` [B, N', C] (float32,
    background at -inf), boxes ``b`` [B, N', 4] or [B, N', C, 4], and the pre_top_k choice.
    ``single``: C is statically 1, so the pair index is the box index. ``known_pairs``: N' * C where it
    is static; at least K of them, TopK needs no spare columns and every position is a pair.
    Non-candidates and spare columns rank at ``below_candidates``, never -inf (``_common.LOWEST``);
    a slot is filled where its pair is a candidate."""
    threshold = const(score_threshold, np.float32)
    floor = const(below_candidates(score_threshold), np.float32)
    if single:
        class_major = op.Squeeze(s, const([2]))
    else:  # allowzero: with no boxes the width is a real 0, not "copy the input's dim"
        pairs = op.Mul(num_classes, num_boxes)
        class_major = op.Reshape(op.Transpose(s, perm=[0, 2, 1]), op.Concat(batch, pairs, axis=0), allowzero=1)
    class_major = nan_to_neg_inf(class_major)  # OpenVINO's CPU plugin lets NaN through Greater + Where
    candidate = op.Greater(class_major, threshold)
    candidates = op.Where(candidate, class_major, floor)
    mark = op.Cast(candidate, to=TensorProto.FLOAT)  # 1 at a candidate: a float gather, which every runtime has
    fits = known_pairs is not None and known_pairs >= keep_top_k
    if not fits:  # spare columns, so that TopK's K always fits
        spare = op.Concat(batch, const([keep_top_k]), axis=0)
        candidates = op.Concat(candidates, op.Expand(floor, spare), axis=1)
        mark = op.Concat(mark, op.Expand(const(0.0, np.float32), spare), axis=1)
    top, position = op.TopK(candidates, const([keep_top_k]), axis=1, largest=1, sorted=1)
    filled = op.Greater(op.GatherElements(mark, position, axis=1), const(0.5, np.float32))
    slot = position if fits else op.Where(filled, position, const(0))  # a spare column is no pair
    if single:
        label, local = const(0), slot
    else:
        per_image = op.Max(num_boxes, const([1]))  # no division by zero when there are no boxes
        label, local = op.Div(slot, per_image), op.Mod(slot, per_image)
    image = op.Unsqueeze(op.Range(const(0), op.Squeeze(batch, const([0])), const(1)), const([1]))
    row = op.Add(op.Mul(image, num_boxes), local)  # the box's row of b flattened to [B * N', 4]
    if per_class:
        row = op.Add(op.Mul(row, num_classes), label)
    index = local
    if chosen is not None:  # a -1 column past the chosen boxes serves the padding rows
        unchosen = op.Expand(const(-1), op.Concat(batch, const([1]), axis=0))
        index = op.GatherElements(op.Concat(chosen, unchosen, axis=1), op.Where(filled, local, num_boxes), axis=1)
    return padded_outputs(filled, op.Reshape(b, const([-1, 4])), row, top, label, index)
