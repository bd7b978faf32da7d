"""fxdeploy's NMS operators: one meaning on every target (see docs/nms-spec.md).

Importing this package registers the ``fxdeploy::`` custom ops. It never imports torchvision.
The wrappers check their arguments here, in Python, where shapes are concrete, then call the op,
so a captured graph holds one ``torch.ops.fxdeploy.*`` node per call.
"""

from __future__ import annotations

import torch

from fxdeploy.ops import library as _library  # noqa: F401  (registers the custom ops)
from fxdeploy.ops.validation import (
    check_background,
    check_bool,
    check_float,
    check_int,
    check_iou_threshold,
    check_multiclass_shapes,
    check_pre_top_k,
    check_tensor,
    check_torchvision_shapes,
)

__all__ = ["batched_nms", "multiclass_nms", "nms"]


def multiclass_nms(
    boxes: torch.Tensor,
    scores: torch.Tensor,
    *,
    iou_threshold: float = 0.5,
    score_threshold: float = 0.05,
    max_output_boxes_per_class: int = 200,
    pre_top_k: int = -1,
    keep_top_k: int = 100,
    background_label_id: int = -1,
    class_agnostic: bool = False,
    output_index: bool = False,
) -> tuple[torch.Tensor, ...]:
    """Batched multi-class NMS with static, padded outputs.

    Returns (det_boxes [B, K, 4], det_scores [B, K], det_labels [B, K] int64, num_dets [B]
    int64), plus det_index [B, K] int64 when ``output_index``. K = keep_top_k. Rows at
    positions >= num_dets[b] are padding: boxes 0, score 0, label -1, index -1.
    """
    op = "multiclass_nms"
    check_tensor(op, "boxes", boxes)
    check_tensor(op, "scores", scores)
    check_multiclass_shapes(boxes, scores)
    args = (
        check_iou_threshold(op, iou_threshold),
        check_float(op, "score_threshold", score_threshold),
        check_int(op, "max_output_boxes_per_class", max_output_boxes_per_class, minimum=1),
        check_pre_top_k(pre_top_k),
        check_int(op, "keep_top_k", keep_top_k, minimum=1),
        check_background(background_label_id, scores.shape[2]),
        check_bool(op, "class_agnostic", class_agnostic),
    )
    with_index = check_bool(op, "output_index", output_index)
    det_boxes, det_scores, det_labels, num_dets, det_index = torch.ops.fxdeploy.multiclass_nms(boxes, scores, *args)
    if with_index:
        return det_boxes, det_scores, det_labels, num_dets, det_index
    return det_boxes, det_scores, det_labels, num_dets


def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """torchvision.ops.nms semantics: indices (int64) of the kept boxes, by decreasing score."""
    check_tensor("nms", "boxes", boxes)
    check_tensor("nms", "scores", scores)
    check_torchvision_shapes("nms", boxes, scores)
    return torch.ops.fxdeploy.nms(boxes, scores, check_float("nms", "iou_threshold", iou_threshold))


def batched_nms(boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """torchvision.ops.batched_nms semantics: NMS never crosses categories given by ``idxs``."""
    op = "batched_nms"
    check_tensor(op, "boxes", boxes)
    check_tensor(op, "scores", scores)
    check_tensor(op, "idxs", idxs, floating=False)
    check_torchvision_shapes(op, boxes, scores, idxs)
    threshold = check_float(op, "iou_threshold", iou_threshold)
    return torch.ops.fxdeploy.batched_nms(boxes, scores, idxs, threshold)
