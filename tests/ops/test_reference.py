"""The reference kernels, rule by rule of docs/nms-spec.md, on hand-made inputs with known answers."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import fxdeploy.ops as ops
from tests.detections import padding_problems

FAR = [[0, 0, 1, 1], [10, 10, 11, 11], [20, 20, 21, 21], [30, 30, 31, 31]]  # disjoint boxes


def run(boxes: Any, scores: Any, **kwargs: Any) -> tuple[torch.Tensor, ...]:
    """multiclass_nms on one image given as nested lists: boxes [N, 4], scores [N, C]."""
    b = torch.tensor([boxes], dtype=torch.float32)
    s = torch.tensor([scores], dtype=torch.float32)
    kwargs.setdefault("keep_top_k", 8)
    result = ops.multiclass_nms(b, s, output_index=True, **kwargs)
    assert padding_problems(result) == []
    return result


def kept(result: tuple[torch.Tensor, ...], image: int = 0) -> list[tuple[int, int]]:
    """(label, box index) of each detection of one image, in output order."""
    count = int(result[3][image])
    return list(zip(result[2][image, :count].tolist(), result[4][image, :count].tolist(), strict=True))


def test_score_threshold_is_strict() -> None:
    result = run(FAR[:3], [[0.05], [0.0500001], [0.3]], score_threshold=0.05)
    assert kept(result) == [(0, 2), (0, 1)]


def test_iou_threshold_is_strict() -> None:
    boxes = [[0, 0, 1, 1], [0, 0, 1, 2]]  # IoU exactly 0.5
    assert kept(run(boxes, [[0.9], [0.8]], iou_threshold=0.5)) == [(0, 0), (0, 1)]
    assert kept(run(boxes, [[0.9], [0.8]], iou_threshold=0.49)) == [(0, 0)]


def test_equal_scores_visit_the_lower_box_index_first() -> None:
    identical = [[0, 0, 1, 1]] * 4
    assert kept(run(identical, [[0.5]] * 4)) == [(0, 0)]
    assert kept(run(FAR, [[0.5]] * 4)) == [(0, 0), (0, 1), (0, 2), (0, 3)]


def test_merge_breaks_score_ties_by_class_then_box() -> None:
    scores = [[0.01, 0.7], [0.7, 0.01], [0.7, 0.7]]
    assert kept(run(FAR[:3], scores)) == [(0, 1), (0, 2), (1, 0), (1, 2)]


def test_background_class_never_produces_detections() -> None:
    result = run(FAR[:2], [[0.9, 0.2], [0.1, 0.8]], background_label_id=0)
    assert kept(result) == [(1, 1), (1, 0)]


def test_pre_top_k_ranks_by_max_over_non_background_classes() -> None:
    # Box 3 has the highest background score, box 0 and 2 tie at 0.6: the lower index wins.
    scores = [[0.6, 0.0], [0.2, 0.0], [0.6, 0.0], [0.3, 0.99]]
    result = run(FAR, scores, pre_top_k=2, background_label_id=1)
    assert kept(result) == [(0, 0), (0, 2)]
    assert kept(run(FAR, scores, pre_top_k=1, background_label_id=1)) == [(0, 0)]


def test_class_agnostic_suppresses_across_labels() -> None:
    boxes = [[0, 0, 1, 1], [0, 0, 1, 1.1]]
    scores = [[0.9, 0.0], [0.0, 0.8]]
    assert kept(run(boxes, scores)) == [(0, 0), (1, 1)]
    assert kept(run(boxes, scores, class_agnostic=True)) == [(0, 0)]
    # The same box in two classes is one candidate pair per class; agnostic NMS keeps one.
    assert kept(run(boxes[:1], [[0.5, 0.5]], class_agnostic=True)) == [(0, 0)]


def test_max_output_boxes_per_class_caps_each_group() -> None:
    scores = [[0.9, 0.4], [0.8, 0.3], [0.7, 0.2], [0.6, 0.1]]
    assert kept(run(FAR, scores, max_output_boxes_per_class=2)) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert kept(run(FAR, scores, max_output_boxes_per_class=3, class_agnostic=True)) == [
        (0, 0),
        (0, 1),
        (0, 2),
    ]


def test_keep_top_k_cut_follows_the_merge_order_in_agnostic_groups() -> None:
    """Agnostic NMS visits score ties by box, the merge ranks them by class: (box 1, class 0) wins
    the single row although box 0 was visited first."""
    result = run(FAR[:2], [[0.01, 0.5], [0.5, 0.01]], class_agnostic=True, keep_top_k=1)
    assert kept(result) == [(0, 1)]


def test_keep_top_k_truncates_and_pads() -> None:
    result = run(FAR, [[0.9], [0.8], [0.7], [0.6]], keep_top_k=3)
    assert [tuple(t.shape) for t in result] == [(1, 3, 4), (1, 3), (1, 3), (1,), (1, 3)]
    assert kept(result) == [(0, 0), (0, 1), (0, 2)]
    padded = run(FAR[:1], [[0.9]], keep_top_k=4)
    assert padded[3].tolist() == [1]
    assert padded[2][0].tolist() == [0, -1, -1, -1] and padded[4][0].tolist() == [0, -1, -1, -1]
    assert padded[0][0, 1:].abs().sum() == 0 and padded[1][0, 1:].abs().sum() == 0


def test_nan_scores_are_never_candidates() -> None:
    nan = float("nan")
    result = run(FAR[:3], [[nan], [0.2], [nan]], score_threshold=float("-inf"))
    assert kept(result) == [(0, 1)]
    assert kept(run(FAR[:2], [[nan], [0.2]], pre_top_k=1, score_threshold=float("-inf"))) == [(0, 1)]


def test_flipped_boxes_are_normalized_and_returned_as_given() -> None:
    result = run([[0, 0, 1, 1], [1, 1, 0, 0]], [[0.8], [0.9]])
    assert kept(result) == [(0, 1)]
    assert result[0][0, 0].tolist() == [1, 1, 0, 0]


def test_zero_area_boxes_have_iou_zero() -> None:
    degenerate = [[0, 0, 0, 1], [0, 0, 0, 1]]
    assert kept(run(degenerate, [[0.9], [0.8]], iou_threshold=0.0)) == [(0, 0), (0, 1)]


def test_per_class_boxes_use_each_class_box() -> None:
    # Class 0 boxes overlap (box 1 suppressed); class 1 boxes are disjoint (both kept).
    boxes = torch.tensor([[[[0, 0, 1, 1], [0, 0, 1, 1]], [[0, 0, 1, 1.1], [5, 5, 6, 6]]]])
    scores = torch.tensor([[[0.9, 0.9], [0.8, 0.8]]])
    result = ops.multiclass_nms(boxes, scores, output_index=True)
    assert kept(result) == [(0, 0), (1, 0), (1, 1)]
    assert result[0][0, 2].tolist() == [5, 5, 6, 6]


def test_images_are_independent() -> None:
    boxes = torch.tensor([FAR, FAR], dtype=torch.float32)
    scores = torch.tensor([[[0.9], [0.8], [0.0], [0.0]], [[0.0], [0.0], [0.0], [0.7]]])
    result = ops.multiclass_nms(boxes, scores, keep_top_k=3, output_index=True)
    assert result[3].tolist() == [2, 1]
    assert kept(result, 0) == [(0, 0), (0, 1)] and kept(result, 1) == [(0, 3)]


@pytest.mark.parametrize("num_boxes", [0, 3])
def test_no_candidates_gives_only_padding(num_boxes: int) -> None:
    boxes, scores = torch.rand(2, num_boxes, 4), torch.zeros(2, num_boxes, 2)
    result = ops.multiclass_nms(boxes, scores, keep_top_k=5, output_index=True)
    assert result[3].tolist() == [0, 0]
    assert padding_problems(result) == []
    assert [tuple(t.shape) for t in result] == [(2, 5, 4), (2, 5), (2, 5), (2,), (2, 5)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_output_dtypes_follow_inputs(dtype: torch.dtype) -> None:
    boxes = torch.tensor([FAR], dtype=dtype)
    scores = torch.tensor([[[0.9], [0.8], [0.7], [0.01]]], dtype=dtype)
    det_boxes, det_scores, det_labels, num_dets = ops.multiclass_nms(boxes, scores)
    assert (det_boxes.dtype, det_scores.dtype) == (dtype, dtype)
    assert (det_labels.dtype, num_dets.dtype) == (torch.int64, torch.int64)
    assert num_dets.tolist() == [3]
    assert torch.equal(det_scores[0, :3], scores[0, :3, 0])


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"class_agnostic": True, "pre_top_k": 5},
        {"background_label_id": 1, "max_output_boxes_per_class": 2, "score_threshold": float("-inf")},
    ],
)
@pytest.mark.parametrize("per_class_boxes", [False, True])
def test_torchscript_reference_matches_eager(kwargs: dict[str, Any], per_class_boxes: bool) -> None:
    from fxdeploy.ops.reference import multiclass_nms_reference

    scripted = torch.jit.script(multiclass_nms_reference)
    boxes = torch.rand(2, 12, 3, 4) if per_class_boxes else torch.rand(2, 12, 4)
    boxes = boxes * 4
    scores = torch.rand(2, 12, 3)
    scores[0, 3, 1] = float("nan")
    args = (
        kwargs.get("iou_threshold", 0.3),
        kwargs.get("score_threshold", 0.2),
        kwargs.get("max_output_boxes_per_class", 6),
        kwargs.get("pre_top_k", -1),
        7,
        kwargs.get("background_label_id", -1),
        kwargs.get("class_agnostic", False),
    )
    want = multiclass_nms_reference(boxes, scores, *args)
    got = scripted(boxes, scores, *args)
    assert all(torch.equal(w, g) for w, g in zip(want, got, strict=True))
    assert int(want[3].sum()) > 0  # the comparison covers real detections, not just padding


def test_nms_follows_torchvision() -> None:
    boxes = torch.tensor([[0, 0, 1, 1], [0, 0, 1, 1.1], [5, 5, 6, 6], [0, 0, 1, 2]], dtype=torch.float32)
    scores = torch.tensor([0.5, 0.9, 0.7, 0.8])
    keep = ops.nms(boxes, scores, 0.5)
    # by decreasing score; box 0 overlaps box 1 (IoU 0.91); box 3 has IoU 0.55 with box 1
    assert keep.dtype == torch.int64 and keep.tolist() == [1, 2]
    assert ops.nms(boxes, scores, 0.6).tolist() == [1, 3, 2]
    assert ops.nms(boxes[:0], scores[:0], 0.5).tolist() == []


def test_nms_does_not_normalize_flipped_boxes() -> None:
    """torchvision takes (x1, y1, x2, y2) as given: a flipped box overlaps nothing."""
    boxes = torch.tensor([[0, 0, 1, 1], [1, 1, 0, 0]], dtype=torch.float32)
    scores = torch.tensor([0.9, 0.8])
    assert ops.nms(boxes, scores, 0.5).tolist() == [0, 1]
    two_classes = torch.tensor([[[0.9], [0.8]]])
    assert int(ops.multiclass_nms(boxes.unsqueeze(0), two_classes)[3][0]) == 1  # the spec normalizes


def test_batched_nms_separates_categories() -> None:
    boxes = torch.tensor([[0, 0, 1, 1], [0, 0, 1, 1.05], [0, 0, 1, 1.1], [5, 5, 6, 6]], dtype=torch.float32)
    scores = torch.tensor([0.9, 0.8, 0.7, 0.6])
    idxs = torch.tensor([0, 1, 0, 1])
    assert ops.batched_nms(boxes, scores, idxs, 0.5).tolist() == [0, 1, 3]
    assert ops.batched_nms(boxes, scores, torch.zeros(4, dtype=torch.long), 0.5).tolist() == [0, 3]
    assert ops.batched_nms(boxes, scores, torch.arange(4), 0.5).tolist() == [0, 1, 2, 3]
