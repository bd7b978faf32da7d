"""torchvision's detectors in the zoo: RetinaNet, FCOS, SSD and Faster R-CNN, ``weights=None``.

torchvision is optional, and has no CPU build on some machines; ``available()`` says why it is
missing, and nothing here imports it before a factory or ``substitutions()`` runs.

The models run as users call them: ``model(list_of_images)``, with torchvision's own transform,
backbone, heads, anchors and box coders. Capture goes through torchvision's code unchanged except
the steps torch.export cannot take with a static output: each model's ``postprocess_detections``,
which filters candidates with boolean masks per image and per level, then calls
``torchvision.ops.batched_nms``; and for Faster R-CNN also the RPN's proposal filter and the
per-level RoI pooling. Each is substituted (on the model's own instance; the pooling function for
the capture only) by a tensor-only version with the same semantics on
``fxdeploy.ops.multiclass_nms``, and an ``unpack``
cuts the padding on the host, so the deployed model returns what eager returns: per image a dict
of ``boxes``, ``scores`` and ``labels`` in eager's order. The list of images has a fixed length,
so the batch is static per lowering.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import fxdeploy
from fxdeploy import Substitution

Detections = list[dict[str, torch.Tensor]]


@functools.cache
def available() -> tuple[bool, str]:
    """(True, "") when torchvision's detection models import here, else (False, why not)."""
    if importlib.util.find_spec("torchvision") is None:
        return False, "torchvision is not installed (it has no CPU build for this torch)"
    try:
        import torchvision.models.detection  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - a CUDA-only wheel raises anything at import
        return False, f"torchvision does not import against this torch: {type(exc).__name__}: {exc}"
    return True, ""


class TorchvisionDetector(nn.Module):
    """``model(list(images))``: a batch tensor in, torchvision's list of per-image dicts out."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> Detections:
        return self.model(list(images.unbind(0)))


def unpack(detections: Detections) -> Detections:
    """Host side: each image's padding rows cut. multiclass_nms pads after the last detection with
    label -1 (NMS_SPEC, step 5), so the count is the number of labels >= 0."""
    result = []
    for image in detections:
        n = int((image["labels"] >= 0).sum())
        result.append({key: value[:n] for key, value in image.items()})
    return result


def _top_k_per_level(level_scores: list[torch.Tensor], k: int) -> torch.Tensor:
    """Per image and level, scores outside the level's top ``k`` (over all (anchor, class) pairs)
    set to 0; [B, A_l, C] levels in, one [B, A, C] out.

    Eager keeps the top k of the scores above the threshold. These are the same pairs once the
    NMS drops what is not above it: if k or more pass, the top k of all pass; if fewer, every one
    that passes is in the top k of all. Only exact ties at the k-th score can differ.
    """
    kept = []
    for scores in level_scores:
        flat = scores.flatten(1)
        kth = flat.topk(min(k, flat.shape[1]), dim=1).values[:, -1:]
        kept.append(torch.where(flat >= kth, flat, torch.zeros_like(flat)).view_as(scores))
    return torch.cat(kept, dim=1)


def _clip(boxes: torch.Tensor, image_shapes: list[tuple[int, int]]) -> torch.Tensor:
    from torchvision.ops import boxes as box_ops

    per_image = zip(boxes.unbind(0), image_shapes, strict=True)
    return torch.stack([box_ops.clip_boxes_to_image(b, shape) for b, shape in per_image])


def _nms(self: Any, boxes: torch.Tensor, scores: torch.Tensor, background: int = -1) -> list[list[torch.Tensor]]:
    """``batched_nms`` by label per image, then its first ``detections_per_img``: one multiclass_nms.
    Returns [boxes, scores, labels], each a list of padded per-image tensors."""
    det_boxes, det_scores, det_labels, _ = fxdeploy.ops.multiclass_nms(
        boxes, scores, iou_threshold=self.nms_thresh, score_threshold=self.score_thresh,
        max_output_boxes_per_class=self.detections_per_img, keep_top_k=self.detections_per_img,
        background_label_id=background,
    )
    return [list(t.unbind(0)) for t in (det_boxes, det_scores, det_labels)]


def _detections(self: Any, boxes: torch.Tensor, scores: torch.Tensor, background: int = -1) -> Detections:
    det_boxes, det_scores, det_labels = _nms(self, boxes, scores, background)
    rows = zip(det_boxes, det_scores, det_labels, strict=True)
    return [{"boxes": b, "scores": s, "labels": lab} for b, s, lab in rows]


def _dense_boxes(
    regression: list[torch.Tensor], anchors: list[list[torch.Tensor]], decode: Callable[..., torch.Tensor],
    image_shapes: list[tuple[int, int]],
) -> torch.Tensor:
    """Every anchor's box, decoded and clipped: [B, A, 4]."""
    deltas = torch.cat(regression, dim=1)
    priors = torch.stack([torch.cat(levels, dim=0) for levels in anchors])
    boxes = decode(deltas.reshape(-1, 4), priors.reshape(-1, 4)).reshape(deltas.shape)
    return _clip(boxes, image_shapes)


def retinanet_postprocess(
    self: Any, head_outputs: dict[str, list[torch.Tensor]], anchors: list[list[torch.Tensor]],
    image_shapes: list[tuple[int, int]],
) -> Detections:
    """Tensor-only ``RetinaNet.postprocess_detections``: sigmoid scores, top ``topk_candidates``
    (anchor, class) pairs per level, boxes decoded from their anchors and clipped, then NMS per
    label over all levels."""
    scores = _top_k_per_level([logits.sigmoid() for logits in head_outputs["cls_logits"]], self.topk_candidates)
    boxes = _dense_boxes(head_outputs["bbox_regression"], anchors, self.box_coder.decode_single, image_shapes)
    return _detections(self, boxes, scores)


def fcos_postprocess(
    self: Any, head_outputs: dict[str, list[torch.Tensor]], anchors: list[list[torch.Tensor]],
    image_shapes: list[tuple[int, int]],
) -> Detections:
    """Tensor-only ``FCOS.postprocess_detections``: as RetinaNet's, with the score
    sqrt(sigmoid(class logit) * sigmoid(centerness)) and FCOS's linear box coder."""
    level_scores = [
        torch.sqrt(logits.sigmoid() * ctrness.sigmoid())
        for logits, ctrness in zip(head_outputs["cls_logits"], head_outputs["bbox_ctrness"], strict=True)
    ]
    scores = _top_k_per_level(level_scores, self.topk_candidates)
    boxes = _dense_boxes(head_outputs["bbox_regression"], anchors, self.box_coder.decode, image_shapes)
    return _detections(self, boxes, scores)


def ssd_postprocess(
    self: Any, head_outputs: dict[str, torch.Tensor], image_anchors: list[torch.Tensor],
    image_shapes: list[tuple[int, int]],
) -> Detections:
    """Tensor-only ``SSD.postprocess_detections``: softmax scores; per class (not background 0)
    the top ``topk_candidates`` anchors; NMS per class."""
    scores = nn.functional.softmax(head_outputs["cls_logits"], dim=-1)  # [B, A, C]
    k = min(self.topk_candidates, scores.shape[1])
    kth = scores.topk(k, dim=1).values[:, -1:, :]  # per image and class
    scores = torch.where(scores >= kth, scores, torch.zeros_like(scores))
    boxes = _dense_boxes([head_outputs["bbox_regression"]], [[a] for a in image_anchors],
                         self.box_coder.decode_single, image_shapes)
    return _detections(self, boxes, scores, background=0)


def rpn_filter_proposals(
    self: Any, proposals: torch.Tensor, objectness: torch.Tensor, image_shapes: list[tuple[int, int]],
    num_anchors_per_level: list[int],
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Tensor-only ``RegionProposalNetwork.filter_proposals``: the top ``pre_nms_top_n`` anchors
    per level (torchvision's own ``_get_top_n_idx``), clipped; small boxes and scores under
    ``score_thresh`` dropped; NMS per level; the first ``post_nms_top_n``.

    Each image gets exactly ``post_nms_top_n`` proposals: after eager's, zero boxes. They pool to
    something, but every box decoded from a zero-size proposal has zero size, and the second
    stage drops small boxes (``roi_heads_postprocess``), as eager does.
    """
    batch = proposals.shape[0]
    objectness = objectness.detach().reshape(batch, -1)
    top = self._get_top_n_idx(objectness, num_anchors_per_level)
    levels = torch.cat([torch.full((n,), i, dtype=torch.int64) for i, n in enumerate(num_anchors_per_level)])
    prob = objectness.gather(1, top).sigmoid()
    boxes = _clip(proposals.gather(1, top.unsqueeze(-1).expand(-1, -1, 4)), image_shapes)
    widths, heights = boxes[..., 2] - boxes[..., 0], boxes[..., 3] - boxes[..., 1]
    valid = (widths >= self.min_size) & (heights >= self.min_size) & (prob >= self.score_thresh)
    # one column per level; a pair is a candidate iff it is the box's level and the box is valid
    level_columns = levels[top].unsqueeze(-1) == torch.arange(len(num_anchors_per_level))
    scores = torch.where(level_columns & valid.unsqueeze(-1), prob.unsqueeze(-1), float("-inf"))
    keep = self.post_nms_top_n()
    det_boxes, det_scores, _, _ = fxdeploy.ops.multiclass_nms(
        boxes, scores, iou_threshold=self.nms_thresh, score_threshold=-1.0,
        max_output_boxes_per_class=keep, keep_top_k=keep,
    )
    return list(det_boxes.unbind(0)), list(det_scores.unbind(0))


def multiscale_roi_align(
    x_filtered: list[torch.Tensor], boxes: list[torch.Tensor], output_size: list[int], sampling_ratio: int,
    scales: list[float] | None, mapper: Any,
) -> torch.Tensor:
    """Tensor-only ``torchvision.ops.poolers._multiscale_roi_align``: eager pools each box at its
    FPN level, gathering the boxes of each level (a data-dependent count); here every box is
    pooled at every level and each keeps its own level's result."""
    from torchvision.ops import roi_align
    from torchvision.ops.poolers import _convert_to_roi_format

    if scales is None or mapper is None:
        raise ValueError("scales and mapper should not be None")
    rois = _convert_to_roi_format(boxes)
    if len(x_filtered) == 1:
        return roi_align(x_filtered[0], rois, output_size, scales[0], sampling_ratio)
    levels = mapper(boxes).reshape(-1, 1, 1, 1)
    result = None
    for level, (features, scale) in enumerate(zip(x_filtered, scales, strict=True)):
        pooled = roi_align(features, rois, output_size, scale, sampling_ratio)
        result = pooled if result is None else torch.where(levels == level, pooled, result)
    return result


def roi_heads_postprocess(
    self: Any, class_logits: torch.Tensor, box_regression: torch.Tensor, proposals: list[torch.Tensor],
    image_shapes: list[tuple[int, int]],
) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    """Tensor-only ``RoIHeads.postprocess_detections``: softmax scores, a box per class decoded
    and clipped, background dropped, scores over ``score_thresh``, boxes under 0.01 px dropped,
    NMS per class, the first ``detections_per_img``."""
    batch, per_image = len(proposals), proposals[0].shape[0]
    boxes = self.box_coder.decode(box_regression, proposals)  # [B * P, C, 4]
    boxes = _clip(boxes.reshape(batch, -1, 4), image_shapes).reshape(batch, per_image, -1, 4)
    scores = nn.functional.softmax(class_logits, -1).reshape(batch, per_image, -1)
    widths, heights = boxes[..., 2] - boxes[..., 0], boxes[..., 3] - boxes[..., 1]
    scores = torch.where((widths >= 1e-2) & (heights >= 1e-2), scores, torch.zeros_like(scores))
    det_boxes, det_scores, det_labels = _nms(self, boxes, scores, background=0)
    return det_boxes, det_scores, det_labels


def _substitution(method: Callable[..., Any], replacement: Callable[..., Detections]) -> dict[Any, Substitution]:
    return {method: Substitution(method, replacement, unpack=unpack)}


def substitutions(name: str) -> dict[Any, Substitution]:
    from torchvision.models.detection import FCOS, RetinaNet
    from torchvision.models.detection.roi_heads import RoIHeads
    from torchvision.models.detection.rpn import RegionProposalNetwork
    from torchvision.models.detection.ssd import SSD
    from torchvision.ops import poolers

    filter_proposals, pool = RegionProposalNetwork.filter_proposals, poolers._multiscale_roi_align
    two_stage = {
        filter_proposals: Substitution(filter_proposals, rpn_filter_proposals),
        pool: Substitution(pool, multiscale_roi_align),
        **_substitution(RoIHeads.postprocess_detections, roi_heads_postprocess),
    }
    return {
        "retinanet": _substitution(RetinaNet.postprocess_detections, retinanet_postprocess),
        "fcos": _substitution(FCOS.postprocess_detections, fcos_postprocess),
        "ssd": _substitution(SSD.postprocess_detections, ssd_postprocess),
        "faster_rcnn": two_stage,
    }[name]


def _images(batch: int, size: int) -> tuple[torch.Tensor]:
    """Images in [0, 1], as torchvision's detectors take them (their transform normalizes)."""
    return (torch.rand(batch, 3, size, size, generator=torch.Generator().manual_seed(0)),)


def _spread_scores(conv: nn.Conv2d, std: float, bias: float) -> None:
    """Random heads start at the focal-loss prior (every score ~0.01, none above the threshold),
    so the parity check would see no detections. A wider, lower-biased classification conv gives
    tens to hundreds per image."""
    with torch.no_grad():
        conv.weight.normal_(0.0, std)
        conv.bias.fill_(bias)


def retinanet() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    from torchvision.models.detection import retinanet_resnet50_fpn

    torch.manual_seed(0)
    model = retinanet_resnet50_fpn(weights=None, weights_backbone=None, min_size=320, max_size=320).eval()
    _spread_scores(model.head.classification_head.cls_logits, 0.01, -4.3)
    return TorchvisionDetector(model).eval(), _images(2, 320)


def fcos() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    from torchvision.models.detection import fcos_resnet50_fpn

    torch.manual_seed(0)
    model = fcos_resnet50_fpn(weights=None, weights_backbone=None, min_size=320, max_size=320).eval()
    _spread_scores(model.head.classification_head.cls_logits, 0.05, -6.0)
    return TorchvisionDetector(model).eval(), _images(2, 320)


def ssd() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    from torchvision.models.detection import ssd300_vgg16

    torch.manual_seed(0)
    model = ssd300_vgg16(weights=None, weights_backbone=None).eval()
    with torch.no_grad():  # VGG without batch norm saturates the softmax: every score 1.0, all ties
        for conv in model.head.classification_head.module_list:
            _spread_scores(conv, 0.0005, 0.0)
            conv.bias.view(-1, model.head.classification_head.num_columns)[:, 0] = 3.5  # background
    return TorchvisionDetector(model).eval(), _images(2, 300)


def faster_rcnn() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    from torchvision.models.detection import fasterrcnn_resnet50_fpn

    torch.manual_seed(0)
    model = fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None, min_size=320, max_size=320).eval()
    # torchvision's box head has no normalization: with random weights its 1024 features are
    # O(100), every softmax saturates (scores of exactly 1.0: all ties) and box deltas are O(10),
    # where a trained head's are O(0.1). Scaled-down predictor weights give O(1) logits and deltas.
    predictor = model.roi_heads.box_predictor
    with torch.no_grad():
        predictor.cls_score.weight.normal_(0.0, 0.002)
        predictor.cls_score.bias.zero_()
        predictor.cls_score.bias[0] = 2.0  # background
        predictor.bbox_pred.weight.normal_(0.0, 0.0005)
    return TorchvisionDetector(model).eval(), _images(2, 320)


ZOO: dict[str, Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]] = {
    "retinanet": retinanet,
    "fcos": fcos,
    "ssd": ssd,
    "faster_rcnn": faster_rcnn,
}
"""name -> factory; ``substitutions(name)`` gives the model's postprocessing substitutions."""
