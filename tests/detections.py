"""Detection-aware comparison for models that return per-image lists of detections."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from tests.ops.nms_matching import MatchReport, assert_detections_match


def pad_per_image(results: Sequence[dict[str, torch.Tensor]]) -> tuple[torch.Tensor, ...]:
    """[{"boxes", "scores", "labels"}] per image → the multiclass_nms tuple (padded, num_dets)."""
    width = max([len(r["scores"]) for r in results] + [1])
    batch = len(results)
    boxes = torch.zeros(batch, width, 4)
    scores = torch.zeros(batch, width)
    labels = torch.full((batch, width), -1, dtype=torch.long)
    counts = torch.zeros(batch, dtype=torch.long)
    for i, r in enumerate(results):
        n = len(r["scores"])
        boxes[i, :n], scores[i, :n], labels[i, :n], counts[i] = r["boxes"], r["scores"], r["labels"], n
    return boxes, scores, labels, counts


def assert_same_detections(
    want: Sequence[dict[str, torch.Tensor]], got: Sequence[dict[str, torch.Tensor]],
    *, iou: float = 0.99, score_atol: float = 1e-4,
) -> MatchReport:
    assert len(want) == len(got), f"{len(got)} images, expected {len(want)}"
    ref, have = pad_per_image(want), pad_per_image(got)
    width = max(ref[0].shape[1], have[0].shape[1])
    ref, have = _widen(ref, width), _widen(have, width)
    return assert_detections_match(ref, have, iou=iou, score_atol=score_atol)


def _widen(result: tuple[torch.Tensor, ...], width: int) -> tuple[torch.Tensor, ...]:
    boxes, scores, labels, counts = result
    extra = width - boxes.shape[1]
    return (
        torch.nn.functional.pad(boxes, (0, 0, 0, extra)),
        torch.nn.functional.pad(scores, (0, extra)),
        torch.nn.functional.pad(labels, (0, extra), value=-1),
        counts,
    )


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
