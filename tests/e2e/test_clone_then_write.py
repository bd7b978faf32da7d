"""A detector whose postprocess clones its boxes and then writes their columns in place, as
YOLOv5's ``xywh2xyxy`` does (and scales its class scores in place, ``x[:, 5:] *= x[:, 4:5]``),
lowered with the default settings on every target: its detections match eager's at batch 1 and 3.

Such a clone was dropped as a no-op once, which moved the writes onto the tensor it copied, so the
corner computed last read a column written first. Passes now see a functional graph
(``fxdeploy/capture/functional.py``); tests/passes/test_translation_validation.py checks the pass
itself, and this checks the artifacts.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import fxdeploy
from examples.idioms import xywh2xyxy  # YOLOv5's clone, then each column written
from fxdeploy.ops import batched_nms
from tests.detections import assert_same_detections
from tests.helpers import require_target

TARGETS = ["onnxruntime", "openvino", "torchscript", "ncnn"]


class CloneThenWrite(nn.Module):
    """A one-level YOLOv5-style head (grid offsets, anchor-scaled sizes, objectness times class
    scores) and YOLOv5's non-maximum suppression, one image at a time."""

    def __init__(self, classes: int = 3, stride: int = 4) -> None:
        super().__init__()
        self.stride = stride
        self.head = nn.Conv2d(3, 5 + classes, 3, stride, 1)
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            self.head.weight.copy_(torch.randn(self.head.weight.shape, generator=generator) * 0.3)
            self.head.bias.zero_()

    def forward(self, images: torch.Tensor) -> list[torch.Tensor]:
        p = self.head(images).sigmoid()
        b, c, h, w = p.shape
        p = p.view(b, c, h * w).permute(0, 2, 1)
        ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        grid = torch.stack((xs, ys), -1).view(1, h * w, 2).float()
        xy = (p[..., :2] * 2 - 0.5 + grid) * self.stride
        wh = (p[..., 2:4] * 2) ** 2 * self.stride * 2
        return non_max_suppression(torch.cat((xy, wh, p[..., 4:]), -1))


def non_max_suppression(
    prediction: torch.Tensor, conf_thres: float = 0.25, iou_thres: float = 0.45, max_det: int = 30
) -> list[torch.Tensor]:
    """Per image: [n, 6] rows of (x1, y1, x2, y2, confidence, class), as YOLOv5 returns them."""
    candidates = prediction[..., 4] > conf_thres
    output = [torch.zeros((0, 6))] * prediction.shape[0]
    for index, x in enumerate(prediction):
        x = x[candidates[index]]
        x[:, 5:] *= x[:, 4:5]
        box = xywh2xyxy(x[:, :4])
        conf, j = x[:, 5:].max(1, keepdim=True)
        x = torch.cat((box, conf, j.float()), 1)[conf.view(-1) > conf_thres]
        keep = batched_nms(x[:, :4], x[:, 4], x[:, 5].long(), iou_thres)[:max_det]
        output[index] = x[keep]
    return output


@pytest.fixture(scope="module")
def model() -> CloneThenWrite:
    return CloneThenWrite().eval()


def _images(batch: int) -> torch.Tensor:
    return torch.rand(batch, 3, 32, 32, generator=torch.Generator().manual_seed(batch))


def _as_dicts(results: list[torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    return [{"boxes": r[:, :4], "scores": r[:, 4], "labels": r[:, 5].long()} for r in results]


@pytest.mark.parametrize("target", TARGETS)
def test_detections_match_eager(model: CloneThenWrite, target: str) -> None:
    require_target(target)
    deployed = fxdeploy.lower(model, (_images(2),), target=target, dynamic_shapes={"images": {0: ("batch", 1, 4)}})
    for batch in (1, 3):
        images = _images(batch)
        with torch.no_grad():
            want = model(images)
        got = deployed(images)
        assert isinstance(got, list) and len(got) == batch
        counts = [len(w) for w in want]
        assert min(counts) >= 2, f"the check is vacuous without detections: {counts}"
        matched = assert_same_detections(_as_dicts(want), _as_dicts(got), iou=0.99, score_atol=1e-4)
        assert [m.matched for m in matched] == counts


def test_the_clone_is_written_and_its_source_is_not(model: CloneThenWrite) -> None:
    """The eager reference itself: the corners differ from what a write through to the source gives."""
    x = torch.tensor([[10.0, 20.0, 4.0, 6.0]])
    assert xywh2xyxy(x).tolist() == [[8.0, 17.0, 12.0, 23.0]]
    assert x.tolist() == [[10.0, 20.0, 4.0, 6.0]]
