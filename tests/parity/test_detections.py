"""Detection-aware matching on known cases, in both layouts (padded contract, per-image dicts)."""

from __future__ import annotations

import torch

from fxdeploy.parity import Tolerances, as_detections, compare_outputs
from fxdeploy.parity.detections import DetectionComparison

BOXES = torch.tensor([[0.0, 0.0, 10.0, 10.0], [20.0, 20.0, 40.0, 40.0], [5.0, 50.0, 25.0, 70.0]])
SCORES = torch.tensor([0.9, 0.8, 0.7])
LABELS = torch.tensor([1, 2, 1])


def padded(boxes: torch.Tensor, scores: torch.Tensor, labels: torch.Tensor, k: int = 5) -> tuple[torch.Tensor, ...]:
    """One image in the multiclass_nms layout, padded the docs/nms-spec.md way (0 boxes, score 0, label -1)."""
    n = len(scores)
    out_boxes, out_scores = torch.zeros(1, k, 4), torch.zeros(1, k)
    out_labels = torch.full((1, k), -1, dtype=torch.long)
    out_boxes[0, :n], out_scores[0, :n], out_labels[0, :n] = boxes, scores, labels
    return out_boxes, out_scores, out_labels, torch.tensor([n])


def check(ref: object, got: object, **tol: float) -> DetectionComparison:
    [result] = compare_outputs(ref, got, Tolerances(**tol))
    assert isinstance(result, DetectionComparison), result
    return result


def test_identical_detections_pass() -> None:
    result = check(padded(BOXES, SCORES, LABELS), padded(BOXES, SCORES, LABELS))
    assert result.ok
    [image] = result.images
    assert (image.matched, image.unmatched_ref, image.unmatched_got) == (3, 0, 0)
    assert image.worst_iou == 1.0 and image.max_score_diff == 0.0


def test_zero_area_boxes_pair_when_their_corners_agree() -> None:
    """Clipping makes zero-area boxes (x1 = x2 at the image edge), whose IoU has no value: float
    noise between runtimes must not turn each into one missing and one extra detection."""
    edge = torch.tensor([[320.0, 12.0, 320.0, 40.0], [5.0, 5.0, 5.0, 5.0], [100.0, 0.0, 140.0, 0.0]])
    noisy = edge + torch.tensor([[0.0, 3e-3, 0.0, -2e-3], [1e-4, 0.0, 0.0, 1e-4], [0.0, 0.0, 2e-3, 0.0]])
    result = check(padded(edge, SCORES, LABELS), padded(noisy, SCORES, LABELS))
    assert result.ok and result.images[0].matched == 3, result.detail
    moved = edge + torch.tensor([0.0, 0.5, 0.0, 0.5])  # half a pixel: another box
    assert not check(padded(edge, SCORES, LABELS), padded(moved, SCORES, LABELS)).ok


def test_one_dropped_detection_fails_and_says_which() -> None:
    result = check(padded(BOXES, SCORES, LABELS), padded(BOXES[:2], SCORES[:2], LABELS[:2]))
    assert not result.ok
    [image] = result.images
    assert (image.matched, image.unmatched_ref, image.unmatched_got) == (2, 1, 0)
    assert "missing label 1 score 0.7" in result.detail


def test_shifted_box_is_unmatched_on_both_sides() -> None:
    shifted = BOXES.clone()
    shifted[1] += torch.tensor([2.0, 0.0, 2.0, 0.0])  # IoU 18/22 ~ 0.82 < 0.99
    result = check(padded(BOXES, SCORES, LABELS), padded(shifted, SCORES, LABELS))
    assert not result.ok
    [image] = result.images
    assert (image.matched, image.unmatched_ref, image.unmatched_got) == (2, 1, 1)
    assert check(padded(BOXES, SCORES, LABELS), padded(shifted, SCORES, LABELS), iou=0.8).ok


def test_tiny_box_jitter_and_score_noise_within_tolerance_pass() -> None:
    jittered = BOXES + 1e-2  # more than CORNER_RTOL of the largest coordinate: a real IoU below 1
    result = check(padded(BOXES, SCORES, LABELS), padded(jittered, SCORES + 5e-5, LABELS))
    assert result.ok and 0.99 <= result.worst_iou < 1.0
    assert not check(padded(BOXES, SCORES, LABELS), padded(BOXES, SCORES + 1e-2, LABELS)).ok


def test_label_swap_fails() -> None:
    swapped = torch.tensor([2, 2, 1])
    result = check(padded(BOXES, SCORES, LABELS), padded(BOXES, SCORES, swapped))
    assert not result.ok
    [image] = result.images
    assert (image.matched, image.unmatched_ref, image.unmatched_got) == (2, 1, 1)


def test_padding_rows_are_ignored() -> None:
    ref = padded(BOXES, SCORES, LABELS, k=5)
    got = tuple(t.clone() for t in padded(BOXES, SCORES, LABELS, k=5))
    got[0][0, 3:] = 123.0  # garbage past num_dets must not matter
    got[1][0, 3:] = 0.99
    got[2][0, 3:] = 7
    assert check(ref, got).ok


def test_ties_in_score_order_match() -> None:
    tied = torch.tensor([0.5, 0.5, 0.5])
    same_label = torch.tensor([3, 3, 3])
    order = torch.tensor([2, 0, 1])  # another runtime lists equal scores in another order
    result = check(padded(BOXES, tied, same_label), padded(BOXES[order], tied[order], same_label[order]))
    assert result.ok and result.images[0].matched == 3


def test_near_duplicate_boxes_pair_by_closest_score() -> None:
    boxes = torch.tensor([[0.0, 0.0, 100.0, 100.0], [0.0, 0.0, 100.0, 100.2]])  # IoU 0.998
    scores, labels = torch.tensor([0.9, 0.6]), torch.tensor([0, 0])
    got_order = torch.tensor([1, 0])
    assert check(padded(boxes, scores, labels), padded(boxes[got_order], scores[got_order], labels)).ok


def test_torchvision_style_list_of_dicts() -> None:
    ref = [{"boxes": BOXES, "scores": SCORES, "labels": LABELS}, {"boxes": BOXES[:0], "scores": SCORES[:0],
                                                                   "labels": LABELS[:0]}]
    got = [{"boxes": BOXES.flip(0), "scores": SCORES.flip(0), "labels": LABELS.flip(0)}, ref[1]]
    result = check(ref, got)
    assert result.ok and [m.matched for m in result.images] == [3, 0]
    assert not check(ref, [ref[0], ref[0]]).ok  # detections where image 1 has none


def test_padded_and_per_image_layouts_compare_with_each_other() -> None:
    per_image = [{"boxes": BOXES, "scores": SCORES, "labels": LABELS}]
    assert check(per_image, padded(BOXES, SCORES, LABELS)).ok


def test_dict_layout_by_key_suffix_and_other_keys_compared_as_tensors() -> None:
    boxes, scores, labels, num = padded(BOXES, SCORES, LABELS)
    ref = {"det_boxes": boxes, "det_scores": scores, "det_labels": labels, "num_dets": num, "feat": torch.ones(2)}
    got = dict(ref, feat=torch.tensor([1.0, 2.0]))
    results = compare_outputs(ref, got, Tolerances())
    assert [(r.name, r.kind, r.ok) for r in results] == [("output", "detections", True), ("feat", "tensor", False)]


def test_what_is_not_detections() -> None:
    assert as_detections((torch.zeros(1, 5, 4), torch.zeros(1, 5), torch.zeros(1, 5), torch.zeros(1))) is None
    assert as_detections([torch.zeros(2, 3)]) is None
    assert as_detections({"boxes": torch.zeros(3, 4)}) is None


def test_a_detection_at_its_nms_threshold_may_appear_where_the_nms_is_given() -> None:
    """bf16 moves a score across its NMS's threshold (0.2539 where eager keeps it below 0.25):
    lower()'s comparison with the model without its substitutions refused TinyYOLO on TorchScript
    where the check itself excuses it. Given the NMS's context (``Tolerances.detections``) it is
    excused; a detection far from the threshold is still refused."""
    from fxdeploy.parity.rows import RowsSpec, nms_context

    ctx = nms_context([None, RowsSpec(0, "nms", iou_threshold=0.45, score_thresholds=(0.25,))])
    assert ctx is not None and nms_context([None, RowsSpec(0, "selected")]) is None
    ref = [{"boxes": BOXES, "scores": SCORES, "labels": LABELS}]
    extra_box = torch.tensor([[60.0, 60.0, 80.0, 90.0]])
    near = {"boxes": torch.cat([BOXES, extra_box]), "scores": torch.cat([SCORES, torch.tensor([0.2539])]),
            "labels": torch.cat([LABELS, torch.tensor([3])])}
    assert not check(ref, [near], score_atol=3e-2).ok
    assert check(ref, [near], score_atol=3e-2, detections=ctx).ok
    far = dict(near, scores=torch.cat([SCORES, torch.tensor([0.5])]))
    assert not check(ref, [far], score_atol=3e-2, detections=ctx).ok
