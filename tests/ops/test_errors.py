"""Bad arguments fail early, with the operator, the argument, the expectation and the value."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch

import fxdeploy.ops as ops

BOXES, SCORES = torch.rand(2, 10, 4), torch.rand(2, 10, 3)


def test_shape_mismatch_names_both_shapes() -> None:
    message = (
        "multiclass_nms: scores must have shape [B, N, C] matching boxes [B, N, 4]; "
        "got boxes (2, 10, 4) and scores (2, 9, 3)"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        ops.multiclass_nms(BOXES, torch.rand(2, 9, 3))


@pytest.mark.parametrize(
    ("boxes", "scores", "expected"),
    [
        (BOXES, torch.rand(2, 10), "scores must have shape [B, N, C]; got (2, 10)"),
        (torch.rand(2, 10, 5), SCORES, "matching boxes [B, N, 4]; got boxes (2, 10, 5)"),
        (torch.rand(3, 10, 4), SCORES, "got boxes (3, 10, 4) and scores (2, 10, 3)"),
        (torch.rand(2, 10, 2, 4), SCORES, "matching boxes [B, N, C, 4]; got boxes (2, 10, 2, 4)"),
        (torch.rand(10, 4), SCORES, "boxes must have shape [B, N, 4] or [B, N, C, 4]; got (10, 4)"),
        (torch.rand(2, 10, 4), torch.rand(2, 10, 0), "at least one class (C >= 1)"),
    ],
)
def test_bad_shapes(boxes: torch.Tensor, scores: torch.Tensor, expected: str) -> None:
    with pytest.raises(ValueError, match=re.escape(expected)):
        ops.multiclass_nms(boxes, scores)


@pytest.mark.parametrize(
    ("boxes", "scores", "expected"),
    [
        (BOXES.long(), SCORES, "boxes must be a floating-point tensor; got dtype torch.int64"),
        (BOXES, SCORES.int(), "scores must be a floating-point tensor; got dtype torch.int32"),
        (BOXES.tolist(), SCORES, "boxes must be a torch.Tensor; got list"),
    ],
)
def test_bad_tensor_types(boxes: Any, scores: Any, expected: str) -> None:
    with pytest.raises(TypeError, match=re.escape(expected)):
        ops.multiclass_nms(boxes, scores)


@pytest.mark.parametrize(
    ("kwargs", "error", "expected"),
    [
        ({"keep_top_k": 0}, ValueError, "keep_top_k must be >= 1; got 0"),
        ({"keep_top_k": 2.0}, TypeError, "keep_top_k must be an int; got float 2.0"),
        ({"keep_top_k": True}, TypeError, "keep_top_k must be an int; got bool True"),
        ({"iou_threshold": 1.5}, ValueError, "iou_threshold must be in [0, 1]; got 1.5"),
        ({"iou_threshold": -0.1}, ValueError, "iou_threshold must be in [0, 1]; got -0.1"),
        ({"iou_threshold": float("nan")}, ValueError, "iou_threshold must not be NaN"),
        ({"iou_threshold": "0.5"}, TypeError, "iou_threshold must be a float; got str '0.5'"),
        ({"score_threshold": float("nan")}, ValueError, "score_threshold must not be NaN"),
        ({"max_output_boxes_per_class": 0}, ValueError, "max_output_boxes_per_class must be >= 1; got 0"),
        ({"pre_top_k": 0}, ValueError, "pre_top_k must be -1 (off) or > 0; got 0"),
        ({"pre_top_k": -2}, ValueError, "pre_top_k must be >= -1; got -2"),
        ({"background_label_id": 3}, ValueError, "background_label_id must be -1 (none) or in [0, 3); got 3"),
        ({"background_label_id": -2}, ValueError, "background_label_id must be >= -1; got -2"),
        ({"class_agnostic": 1}, TypeError, "class_agnostic must be a bool; got int 1"),
        ({"output_index": None}, TypeError, "output_index must be a bool; got NoneType None"),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], error: type[Exception], expected: str) -> None:
    with pytest.raises(error, match=re.escape(f"multiclass_nms: {expected}")):
        ops.multiclass_nms(BOXES, SCORES, **kwargs)


@pytest.mark.parametrize("threshold", [float("-inf"), -3.5, 0.0, 2.0, float("inf")])
def test_any_score_threshold_is_accepted(threshold: float) -> None:
    """Logits can be negative, so score_threshold is not limited to [0, 1]."""
    num_dets = ops.multiclass_nms(BOXES, SCORES, score_threshold=threshold)[3]
    assert num_dets.shape == (2,)
    if threshold >= 1.0:
        assert num_dets.tolist() == [0, 0]


@pytest.mark.parametrize(
    ("call", "error", "expected"),
    [
        (
            lambda: ops.nms(torch.rand(5, 5), torch.rand(5), 0.5),
            ValueError,
            "nms: boxes must have shape [N, 4]",
        ),
        (
            lambda: ops.nms(torch.rand(5, 4), torch.rand(4), 0.5),
            ValueError,
            "got boxes (5, 4) and scores (4,)",
        ),
        (
            lambda: ops.nms(torch.rand(5, 4).int(), torch.rand(5), 0.5),
            TypeError,
            "nms: boxes must be a floating",
        ),
        (
            lambda: ops.nms(torch.rand(5, 4), torch.rand(5), None),
            TypeError,
            "nms: iou_threshold must be a float",
        ),
        (
            lambda: ops.batched_nms(torch.rand(5, 4), torch.rand(5), torch.rand(5), 0.5),
            TypeError,
            "batched_nms: idxs must be an integer tensor; got dtype torch.float32",
        ),
        (
            lambda: ops.batched_nms(torch.rand(5, 4), torch.rand(5), torch.zeros(4, dtype=torch.long), 0.5),
            ValueError,
            "batched_nms: idxs must have shape [N] matching boxes [N, 4]; got boxes (5, 4) and idxs (4,)",
        ),
    ],
)
def test_torchvision_style_ops_check_their_inputs(call: Any, error: type[Exception], expected: str) -> None:
    with pytest.raises(error, match=re.escape(expected)):
        call()


class _BadDetector(torch.nn.Module):
    def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return ops.multiclass_nms(boxes, scores, keep_top_k=0)


def test_errors_surface_while_exporting() -> None:
    """The checks run on static values during tracing, so a bad call fails export, not deployment."""
    with pytest.raises(Exception, match=re.escape("multiclass_nms: keep_top_k must be >= 1; got 0")):
        torch.export.export(_BadDetector(), (BOXES, SCORES), strict=True)
