"""Eager reference kernels. They *define* the semantics of fxdeploy's NMS operators (docs/nms-spec.md).

Every lowering is tested against these functions, and the TorchScript target scripts
``multiclass_nms_reference`` and inlines it as aten code, so the module must stay
TorchScript-compatible (no ``from __future__ import annotations``: TorchScript reads real types).
Arguments are assumed valid: the public wrappers in ``fxdeploy.ops`` check them.
"""

import torch
from torch import Tensor

from fxdeploy.ops.greedy import greedy_keep, normalize_corners


def _compute_dtype(t: Tensor) -> torch.dtype:
    """float16/bfloat16 are compared in float32: that is what every lowering does."""
    if t.dtype == torch.float64:
        return torch.float64
    return torch.float32


def effective_cap(max_output_boxes_per_class: int, keep_top_k: int, class_agnostic: bool) -> int:
    """Boxes a class may keep without changing the output: at most keep_top_k of them can reach
    the K rows, and those are its first keep_top_k in visiting order, which the merge also
    ranks first. Not so for class-agnostic groups: their visiting order breaks score ties by box
    and the merge by class, so a later box can outrank an earlier one there."""
    if class_agnostic:
        return max_output_boxes_per_class
    return min(max_output_boxes_per_class, keep_top_k)


def _candidate_scores(scores: Tensor, score_threshold: float, pre_top_k: int, background_label_id: int) -> Tensor:
    """Scores with every pair that is not a candidate (spec steps 1 and 2) set to -inf."""
    neg_inf = float("-inf")
    s = scores.to(_compute_dtype(scores))
    s = s.masked_fill(torch.isnan(s), neg_inf)
    num_boxes, num_classes = s.shape[1], s.shape[2]
    if background_label_id >= 0 and background_label_id < num_classes:
        s = s.masked_fill(torch.arange(num_classes, device=s.device) == background_label_id, neg_inf)
    if pre_top_k > 0 and pre_top_k < num_boxes:
        best = s.amax(dim=2)
        # A stable descending sort sends ties to the lower box index, as the spec asks.
        top = torch.sort(best, dim=1, descending=True, stable=True)[1][:, :pre_top_k]
        chosen = torch.zeros_like(best, dtype=torch.bool).scatter_(1, top, torch.ones_like(top, dtype=torch.bool))
        s = s.masked_fill(~chosen.unsqueeze(2), neg_inf)
    return s.masked_fill(~(s > score_threshold), neg_inf)


def multiclass_nms_reference(
    boxes: Tensor,
    scores: Tensor,
    iou_threshold: float,
    score_threshold: float,
    max_output_boxes_per_class: int,
    pre_top_k: int,
    keep_top_k: int,
    background_label_id: int,
    class_agnostic: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(det_boxes, det_scores, det_labels, num_dets, det_index), padded to keep_top_k rows."""
    batch, num_boxes, num_classes = scores.shape[0], scores.shape[1], scores.shape[2]
    device = scores.device
    s = _candidate_scores(scores, score_threshold, pre_top_k, background_label_id)
    stride = num_classes if boxes.dim() == 4 else 1
    flat_boxes = boxes.reshape(batch, num_boxes * stride, 4)
    # A group is one NMS problem: (image, class), or one image when class-agnostic, whose
    # elements are the (box, class) pairs in flat order n * C + c (ties: lower n, then lower c).
    if class_agnostic:
        group_scores = s.reshape(batch, num_boxes * num_classes)
    else:
        group_scores = s.permute(0, 2, 1).reshape(batch * num_classes, num_boxes)
    count = (group_scores > float("-inf")).sum(1)
    width = int(count.max()) if count.numel() > 0 else 0
    sorted_scores, order = torch.sort(group_scores, dim=1, descending=True, stable=True)
    sorted_scores, order = sorted_scores[:, :width], order[:, :width]
    valid = torch.arange(width, device=device).unsqueeze(0) < count.unsqueeze(1)
    if class_agnostic:
        image = torch.arange(batch, device=device).unsqueeze(1).expand(batch, width)
        box_index = torch.div(order, num_classes, rounding_mode="floor")
        label = torch.remainder(order, num_classes)
    else:
        group = torch.arange(batch * num_classes, device=device).unsqueeze(1)
        image = torch.div(group, num_classes, rounding_mode="floor").expand(-1, width)
        label = torch.remainder(group, num_classes).expand(-1, width)
        box_index = order
    flat_index = box_index * stride + label if stride > 1 else box_index
    candidates = flat_boxes[image, flat_index].to(_compute_dtype(boxes))
    cap = effective_cap(max_output_boxes_per_class, keep_top_k, class_agnostic)
    keep = greedy_keep(normalize_corners(candidates), valid, iou_threshold, cap)
    return _merge_top_k(
        flat_boxes,
        sorted_scores.masked_fill(~keep, float("-inf")).reshape(batch, -1),
        flat_index.reshape(batch, -1),
        box_index.reshape(batch, -1),
        label.reshape(batch, -1),
        keep.reshape(batch, -1).sum(1),
        num_boxes,
        keep_top_k,
        scores.dtype,
    )


def _merge_top_k(
    flat_boxes: Tensor,
    kept_scores: Tensor,
    flat_index: Tensor,
    box_index: Tensor,
    label: Tensor,
    kept_count: Tensor,
    num_boxes: int,
    keep_top_k: int,
    score_dtype: torch.dtype,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Spec steps 4-5: per image, order kept pairs by score (ties: class, then box), pad to K."""
    batch, width = kept_scores.shape[0], kept_scores.shape[1]
    device = kept_scores.device
    # Two stable sorts: first by the tie-break key, then by score; the key order survives ties.
    by_key = torch.sort(label * num_boxes + box_index, dim=1, stable=True)[1]
    by_score = torch.sort(kept_scores.gather(1, by_key), dim=1, descending=True, stable=True)[1]
    take = min(keep_top_k, width)
    order = by_key.gather(1, by_score)[:, :take]
    num_dets = kept_count.clamp(max=keep_top_k)
    filled = torch.arange(keep_top_k, device=device).unsqueeze(0) < num_dets.unsqueeze(1)
    pad = keep_top_k - take
    sel_flat = _pad_columns(flat_index.gather(1, order), pad, 0.0)
    if flat_boxes.shape[1] == 0:  # no boxes at all: nothing to gather from
        det_boxes = flat_boxes.new_zeros((batch, keep_top_k, 4))
    else:
        det_boxes = flat_boxes.gather(1, sel_flat.unsqueeze(2).expand(-1, -1, 4))
        det_boxes = det_boxes.masked_fill(~filled.unsqueeze(2), 0.0)
    det_scores = _pad_columns(kept_scores.gather(1, order), pad, 0.0).to(score_dtype)
    det_scores = det_scores.masked_fill(~filled, 0.0)
    det_labels = _pad_columns(label.gather(1, order), pad, -1.0).masked_fill(~filled, -1)
    det_index = _pad_columns(box_index.gather(1, order), pad, -1.0).masked_fill(~filled, -1)
    return det_boxes, det_scores, det_labels, num_dets, det_index


def _pad_columns(t: Tensor, pad: int, value: float) -> Tensor:
    if pad <= 0:
        return t
    return torch.cat([t, torch.full((t.shape[0], pad), value, dtype=t.dtype, device=t.device)], 1)


def _sorted_greedy(boxes: Tensor, scores: Tensor, iou_threshold: float, labels: Tensor | None) -> Tensor:
    """torchvision semantics: corners taken as given (no normalization), no cap."""
    n = scores.shape[0]
    order = torch.sort(scores, descending=True, stable=True)[1]
    candidates = boxes[order].to(_compute_dtype(boxes)).unsqueeze(0)
    valid = torch.ones((1, n), dtype=torch.bool, device=boxes.device)
    group_labels = labels[order].unsqueeze(0) if labels is not None else None
    keep = greedy_keep(candidates, valid, iou_threshold, n, group_labels)[0]
    return order[keep]


def nms_reference(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """torchvision.ops.nms: kept indices (int64), by decreasing score."""
    return _sorted_greedy(boxes, scores, iou_threshold, None)


def batched_nms_reference(boxes: Tensor, scores: Tensor, idxs: Tensor, iou_threshold: float) -> Tensor:
    """torchvision.ops.batched_nms: boxes of different ``idxs`` never suppress each other."""
    return _sorted_greedy(boxes, scores, iou_threshold, idxs.to(torch.long))
