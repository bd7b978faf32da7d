"""Detection-aware comparison for models that return per-image lists of detections."""

from __future__ import annotations

from collections.abc import Sequence

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
