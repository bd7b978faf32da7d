"""A capture that the example's real values decide (a Python branch on a selection's size) keeps
the input's dynamic H and W where a channel split makes a view at a symbolic offset: torch's own
cross-check of fake against real offsets no longer guards the area to the example's
(``fxdeploy/capture/real_values.py``). Ultralytics' YOLO (a ``chunk`` in every C2f block, ``if not
x.shape[0]: continue`` in its NMS) is the model this stood in the way of."""

from __future__ import annotations

import functools
import warnings

import pytest
import torch
from torch import nn
from torch._subclasses import fake_utils

import fxdeploy
from examples.detector import TinyYolo, _conv, batched_nms
from fxdeploy.capture.fixes import DimWarning
from fxdeploy.capture.real_values import offsets_unguarded
from tests.detections import assert_same_detections
from tests.detectors.test_tiny_yolo import images
from tests.helpers import count_engine_calls, require_target


class _Split(nn.Module):
    """A C2f-style block: half the channels kept, the other half convolved, joined again."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = _conv(channels // 2, channels // 2)

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        a, b = y.chunk(2, 1)
        return torch.cat((a, self.conv(b)), 1)


class SplitYolo(TinyYolo):
    """TinyYolo with a channel split in its stem and Ultralytics' branch on an empty selection."""

    def __init__(self) -> None:
        super().__init__(max_det=300, iou_threshold=0.45, conf_threshold=0.7)
        self.stem = nn.Sequential(*self.stem, _Split(32))

    def postprocess(self, boxes: torch.Tensor, scores: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        results = []
        for image in range(boxes.shape[0]):
            conf, labels = scores[image].max(-1)
            keep = conf > self.conf_threshold
            b, s, c = boxes[image][keep], conf[keep], labels[keep]
            if not b.shape[0]:  # the branch the example's real values decide
                results.append({"boxes": b, "scores": s, "labels": c})
                continue
            kept = batched_nms(b, s, c, self.iou_threshold)[: self.max_det]
            results.append({"boxes": b[kept], "scores": s[kept], "labels": c[kept]})
        return results


def split_yolo() -> SplitYolo:
    torch.manual_seed(0)
    model = SplitYolo().eval()
    with torch.no_grad():
        for head in model.cls_head:
            head.weight.normal_(0.0, 8.0)
            head.bias.fill_(-1.0)
    return model


@functools.cache
def _shared_split_yolo() -> SplitYolo:
    """One for the test below, never changed by it: lowered for another target it starts from the
    first lowering's capture (fxdeploy.capture.memo), as in a user's process."""
    return split_yolo()


@pytest.mark.parametrize("target", ["onnxruntime", "openvino", "torchscript"])
def test_a_branch_on_a_selection_keeps_a_dynamic_height_and_width_through_a_channel_split(target: str) -> None:
    """Lowered once with batch 1..8 and H, W = 16 * [4, 16]: no DimWarning, and every detection as
    eager's at other sizes and batches, one engine call each. Before, the capture held only at the
    example's area (``InputError: ... == 4096``) and lower() warned at the min and max shapes."""
    require_target(target)
    model = _shared_split_yolo()
    h, w = torch.export.Dim("h", min=4, max=16), torch.export.Dim("w", min=4, max=16)
    shapes = {"images": {0: ("batch", 1, 8), 2: 16 * h, 3: 16 * w}}
    with warnings.catch_warnings():
        warnings.simplefilter("error", DimWarning)
        deployed = fxdeploy.lower(model, (images(2, 0),), target=target, dynamic_shapes=shapes)
    assert deployed.manifest["inputs"][0]["shape"] == ["batch", 3, "16*h", "16*w"]
    for batch, size, seed in ((1, (128, 128), 3), (3, (64, 224), 1), (2, (256, 160), 0)):
        x = torch.nn.functional.interpolate(images(batch, seed), size=size, mode="nearest")
        with torch.no_grad():
            want = model(x)
        assert sum(len(image["scores"]) for image in want) > 5 * batch, "too few detections to compare"
        calls = count_engine_calls(deployed)
        got = deployed(x)
        assert calls[0] == 1, f"batch {batch}: {calls[0]} engine calls"
        assert_same_detections(want, got, score_atol=1e-4)


def test_the_cross_check_is_torch_own_again_afterwards_even_after_an_error() -> None:
    original = fake_utils._check_fake_real_tensors
    with pytest.raises(RuntimeError, match="inside"), offsets_unguarded():
        assert fake_utils._check_fake_real_tensors is not original
        raise RuntimeError("inside")
    assert fake_utils._check_fake_real_tensors is original
