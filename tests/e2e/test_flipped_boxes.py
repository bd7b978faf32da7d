"""Boxes given with flipped corners (x2 < x1 or y2 < y1), as a user's own decode can make them:
torchvision's ``nms`` takes corners as given, so such a box overlaps nothing, and ``multiclass_nms``
normalizes them. Every target kept fewer boxes than eager, and lower()'s check passed it whenever
the example had no flipped box (``padding/nms.py`` collapses the flipped axes first)."""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from tests.helpers import require_target
from tests.passes.padding.test_nms import KeepsGivenBoxes, flipped_boxes, normalized


@pytest.mark.parametrize("target", ["onnxruntime", "openvino", "torchscript", "ncnn"])
def test_flipped_boxes_are_kept_as_eager_keeps_them(target: str) -> None:
    require_target(target)
    model = KeepsGivenBoxes()
    boxes, scores = flipped_boxes(0)
    example = (normalized(boxes), scores)  # no flipped box: the check alone cannot see it
    deployed = fxdeploy.lower(model, example, target=target)
    for seed in range(3):
        boxes, scores = flipped_boxes(seed)
        want = model(boxes, scores)
        torch.testing.assert_close(deployed(boxes, scores), want, rtol=0, atol=0)
