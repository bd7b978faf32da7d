"""The detection-aware matcher must tolerate tie reordering and catch every real difference."""

from __future__ import annotations

import pytest
import torch

from tests.ops.nms_matching import assert_detections_match, box_iou, match_detections, padding_problems, same_box


def _result() -> tuple[torch.Tensor, ...]:
    boxes = torch.tensor([[[0.0, 0.0, 1.0, 1.0], [5.0, 5.0, 6.0, 6.0], [0.0, 0.0, 0.0, 0.0]]])
    return boxes, torch.tensor([[0.9, 0.9, 0.0]]), torch.tensor([[0, 1, -1]]), torch.tensor([2])


def _edit(**changes: tuple[tuple[int, ...], object]) -> tuple[torch.Tensor, ...]:
    fields = dict(zip(("boxes", "scores", "labels", "num_dets"), (t.clone() for t in _result()), strict=True))
    for name, (where, value) in changes.items():
        fields[name][where] = value
    return tuple(fields.values())


def test_reordered_ties_match() -> None:
    boxes, scores, labels, num_dets = _result()
    swapped = (boxes[:, [1, 0, 2]], scores[:, [1, 0, 2]], labels[:, [1, 0, 2]], num_dets)
    report = assert_detections_match(_result(), swapped)
    assert (report.matched, report.worst_iou, report.max_score_diff) == (2, 1.0, 0.0)


@pytest.mark.parametrize(
    "changes",
    [
        {"labels": ((0, 1), 2)},
        {"boxes": ((0, 1, 2), 6.5)},
        {"scores": ((0, 0), 0.8)},
        {"num_dets": ((0,), 1)},
    ],
    ids=["label", "box", "score", "count"],
)
def test_real_differences_are_reported(changes: dict[str, tuple[tuple[int, ...], object]]) -> None:
    report = match_detections(_result(), _edit(**changes))
    assert not report.ok
    with pytest.raises(AssertionError, match="detections differ"):
        assert_detections_match(_result(), _edit(**changes))


def test_padding_problems_flags_non_padding_rows() -> None:
    assert padding_problems(_result()) == []
    assert padding_problems(_edit(labels=((0, 2), 0))) == ["padding rows hold labels other than -1"]
    assert padding_problems(_edit(scores=((0, 2), 0.1))) == ["padding rows hold non-zero boxes or scores"]


def test_degenerate_and_thin_boxes_match_when_their_corners_agree() -> None:
    """IoU cannot pair a zero-width box (clipping makes them) or a 0.14 px thin one that moved by
    0.001 px; agreeing corners can, and a real move still fails."""
    line = [0.0, 174.14085, 0.0, 294.87982]
    assert same_box(line, [0.0, 174.14091, 0.0, 294.87988], 0.99)
    thin = [194.2793, 273.3397, 200.3851, 273.4810]
    moved = [194.2782, 273.3407, 200.3841, 273.4820]
    assert box_iou(thin, moved) < 0.99 and same_box(thin, moved, 0.99)
    assert not same_box(line, [0.0, 175.0, 0.0, 294.87982], 0.99)
    assert not same_box(thin, [194.2793, 273.3397, 200.3851, 273.6], 0.99)
