"""Test helpers around fxdeploy.parity's detection matcher: the NMS contract's padded tuples and
torchvision's per-image dicts as Detections, the padding rule, and NMS-threshold flips."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from fxdeploy.parity import Detections, ImageMatch, Rules, Tolerance, match_image
from fxdeploy.parity.excuses import Context


def per_image(result: Sequence[torch.Tensor]) -> list[Detections]:
    """A multiclass_nms result (boxes, scores, labels, num_dets[, index]) cut at each image's count."""
    boxes, scores, labels, num_dets = result[:4]
    return [Detections(boxes[b, :n], scores[b, :n], labels[b, :n]) for b, n in enumerate(num_dets.tolist())]


def compare_images(
    want: Sequence[Detections], got: Sequence[Detections], iou: float, score_atol: float, ctx: Context | None = None
) -> list[ImageMatch]:
    """Per image, paired by label and IoU; ``ctx``: what decided the rows (an NMS's threshold), for the
    excuses of fxdeploy.parity.excuses, none by default."""
    assert len(want) == len(got), f"{len(got)} images, expected {len(want)}"
    rules = Rules(iou, Tolerance(score_atol))
    return [match_image(image, w, g, rules, ctx) for image, (w, g) in enumerate(zip(want, got, strict=True))]


def assert_no_problems(images: list[ImageMatch]) -> list[ImageMatch]:
    problems = [p for m in images for p in m.problems]
    assert not problems, "detections differ:\n  " + "\n  ".join(problems[:10])
    return images


def assert_detections_match(
    ref: Sequence[torch.Tensor], got: Sequence[torch.Tensor], iou: float = 0.99, score_atol: float = 1e-5
) -> list[ImageMatch]:
    """Two multiclass_nms results hold the same detections, per image, and the same counts."""
    assert ref[0].shape == got[0].shape, f"det_boxes shapes differ: {tuple(ref[0].shape)} vs {tuple(got[0].shape)}"
    return assert_no_problems(compare_images(per_image(ref), per_image(got), iou, score_atol))


def assert_same_detections(
    want: Sequence[dict[str, torch.Tensor]], got: Sequence[dict[str, torch.Tensor]],
    *, iou: float = 0.99, score_atol: float = 1e-4, ctx: Context | None = None,
) -> list[ImageMatch]:
    """Per-image dicts (torchvision's layout): their boxes, scores and labels; ``ctx`` as in
    ``compare_images``."""
    def dets(results: Sequence[dict[str, torch.Tensor]]) -> list[Detections]:
        return [Detections(r["boxes"], r["scores"], r["labels"]) for r in results]

    return assert_no_problems(compare_images(dets(want), dets(got), iou, score_atol, ctx))


def padding_problems(result: Sequence[torch.Tensor]) -> list[str]:
    """Rows at positions >= num_dets must hold boxes 0, score 0, label -1 (and index -1)."""
    boxes, scores, labels, num_dets = result[:4]
    problems = []
    positions = torch.arange(boxes.shape[1]).unsqueeze(0)
    pad = positions >= num_dets.unsqueeze(1)
    if bool((boxes[pad] != 0).any()) or bool((scores[pad] != 0).any()):
        problems.append("padding rows hold non-zero boxes or scores")
    if bool((labels[pad] != -1).any()):
        problems.append("padding rows hold labels other than -1")
    if len(result) > 4 and bool((result[4][pad] != -1).any()):
        problems.append("padding rows hold indices other than -1")
    if bool((labels[~pad] < 0).any()):
        problems.append("a detection row has a negative label")
    return problems


def without_threshold_flips(
    want: Sequence[dict[str, torch.Tensor]], got: Sequence[dict[str, torch.Tensor]], nms_iou: float,
    margin: float = 1e-3, most: int = 1,
) -> tuple[list[dict[str, torch.Tensor]], list[dict[str, torch.Tensor]], int]:
    """Both sides without the detections that one side lacks only because its IoU with a kept box of
    its class lies within ``margin`` of the NMS threshold: two runtimes' float noise can put it on
    either side (seen: 0.449964 on OpenVINO, 0.449963 in torch, threshold 0.45). At most ``most``
    per image; a cascade (a flip that changes what else survives) is not excused."""
    from torchvision.ops import box_iou

    kept_want, kept_got, excused = [], [], 0
    for w, g in zip(want, got, strict=True):
        drop_w = _flips(w, g, nms_iou, margin, box_iou)
        drop_g = _flips(g, w, nms_iou, margin, box_iou)
        assert len(drop_w) + len(drop_g) <= most, f"{len(drop_w) + len(drop_g)} detections at the NMS threshold"
        excused += len(drop_w) + len(drop_g)
        kept_want.append({k: v[[i for i in range(len(v)) if i not in drop_w]] for k, v in w.items()})
        kept_got.append({k: v[[i for i in range(len(v)) if i not in drop_g]] for k, v in g.items()})
    return kept_want, kept_got, excused


def _flips(mine: dict[str, torch.Tensor], other: dict[str, torch.Tensor], nms_iou: float, margin: float,
           box_iou: Any) -> set[int]:
    """Detections of ``mine`` with no counterpart in ``other`` whose IoU with a same-class box of
    ``other`` sits within ``margin`` of the NMS threshold."""
    flips = set()
    for i in range(len(mine["scores"])):
        same = other["labels"] == mine["labels"][i]
        if not bool(same.any()):
            continue
        ious = box_iou(mine["boxes"][i : i + 1], other["boxes"][same])[0]
        if float(ious.max()) < 0.99 and bool(((ious - nms_iou).abs() <= margin).any()):
            flips.add(i)
    return flips
