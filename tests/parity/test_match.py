"""The one detection matcher must tolerate tie reordering and catch every real difference."""

from __future__ import annotations

import pytest
import torch

from fxdeploy.parity import Detections, Rules, Tolerance, box_iou, match_image
from tests.detections import assert_detections_match, padding_problems, per_image


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
    [image] = assert_detections_match(_result(), swapped)
    assert (image.matched, image.worst_iou, image.max_score_diff) == (2, 1.0, 0.0)


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
    [report] = [match_image(0, r, g, Rules(scores=Tolerance(1e-5))) for r, g in zip(
        per_image(_result()), per_image(_edit(**changes)), strict=True)]
    assert not report.ok
    with pytest.raises(AssertionError, match="detections differ"):
        assert_detections_match(_result(), _edit(**changes))


def test_padding_problems_flags_non_padding_rows() -> None:
    assert padding_problems(_result()) == []
    assert padding_problems(_edit(labels=((0, 2), 0))) == ["padding rows hold labels other than -1"]
    assert padding_problems(_edit(scores=((0, 2), 0.1))) == ["padding rows hold non-zero boxes or scores"]


def same_box(a: list[float], b: list[float], iou: float) -> bool:
    return bool(box_iou(torch.tensor([a]), torch.tensor([b])) >= iou)


def plain_iou(a: list[float], b: list[float]) -> float:
    """IoU alone, without the corner rule (only identical boxes count as 1)."""
    return float(box_iou(torch.tensor([a]), torch.tensor([b]), corner_rtol=0.0))


def test_degenerate_and_thin_boxes_match_when_their_corners_agree() -> None:
    """IoU cannot pair a zero-width box (clipping makes them) or a 0.14 px thin one that moved by
    0.001 px; agreeing corners can, and a real move still fails."""
    line = [0.0, 174.14085, 0.0, 294.87982]
    assert same_box(line, [0.0, 174.14091, 0.0, 294.87988], 0.99)
    thin = [194.2793, 273.3397, 200.3851, 273.4810]
    moved = [194.2782, 273.3407, 200.3841, 273.4820]
    assert plain_iou(thin, moved) < 0.99 and same_box(thin, moved, 0.99)
    assert not same_box(line, [0.0, 180.0, 0.0, 294.87982], 0.99)  # its span's IoU: 0.95
    assert not same_box(thin, [194.2793, 273.3397, 200.3851, 273.6], 0.99)


def test_flat_boxes_at_the_same_level_pair_by_the_iou_of_their_spans() -> None:
    """FCOS decodes boxes whose top and bottom meet; two runtimes put their ends 0.01 px apart. At
    the same y they pair by their x spans' IoU; a segment one pixel lower, or a span cut by a
    tenth, does not."""
    flat = [68.33, 96.0, 100.48, 96.0]
    assert plain_iou(flat, [68.34, 96.0, 100.47, 96.0]) > 0.99
    assert not same_box(flat, [68.33, 97.0, 100.48, 97.0], 0.5)
    assert not same_box(flat, [71.5, 96.0, 100.48, 96.0], 0.99)


def test_every_problem_names_the_image_the_row_and_the_field() -> None:
    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [20.0, 20.0, 40.0, 40.0]])
    ref = Detections(boxes, torch.tensor([0.9, 0.8]), torch.tensor([0, 1]), {"keypoints": torch.zeros(2, 17, 3)})
    moved = ref.fields["keypoints"].clone()
    moved[1, 4, 0] = 2.0
    got = Detections(boxes, torch.tensor([0.9, 0.7]), torch.tensor([0, 1]), {"keypoints": moved})
    result = match_image(3, ref, got)
    assert result.matched == 2 and not result.ok
    assert "image 3 row 1: score differs by 0.1 > 0.0001" in result.problems
    assert "image 3 row 1: keypoints differs by 2 > 0.0001" in result.problems
    dropped = match_image(3, ref, Detections(boxes[:1], ref.scores[:1], ref.labels[:1], {"keypoints": moved[:1]}))
    assert dropped.problems[:2] == ("image 3: 1 detection(s), expected 2",
                                    "image 3 row 1: missing label 1 score 0.8 box [20.0, 20.0, 40.0, 40.0]")


def test_a_nan_score_never_passes() -> None:
    """NMS never keeps a NaN score (docs/nms-spec.md), so a NaN where eager has a number is a failure."""
    ref = Detections(torch.tensor([[0.0, 0.0, 1.0, 1.0]]), torch.tensor([0.9]), torch.tensor([0]))
    got = Detections(ref.boxes, torch.tensor([float("nan")]), ref.labels)
    assert not match_image(0, ref, got).ok


def test_box_tolerance_checks_paired_corners() -> None:
    """lower()'s check also bounds each paired corner (atol scaled by the largest coordinate)."""
    ref = Detections(torch.tensor([[0.0, 0.0, 100.0, 100.0]]), torch.tensor([0.9]), torch.tensor([0]))
    got = Detections(ref.boxes + torch.tensor([0.0, 0.0, 0.0, 0.2]), ref.scores, ref.labels)
    assert match_image(0, ref, got).ok  # IoU 0.998: the same box
    strict = Rules(boxes=Tolerance(1e-4, of_largest=True))
    assert match_image(0, ref, got, strict).problems == ("image 0 row 0: box differs by 0.2 > 0.01",)
