"""torchvision's box decoding on ncnn: deltas read as ``[:, k::4]`` columns, boxes clipped by ``[..., 0::2]``.

``BoxCoder.decode_single`` and ``clip_boxes_to_image`` slice with a step, which ncnn's Crop layer
cannot; the ``strided_slices`` pass respells those slices, so this head lowers to ncnn whole (the
NMS runs on the host) and matches eager.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import fxdeploy
from tests.e2e.ncnn_detectors import assert_matches_eager, lower_on_ncnn

CLASSES, STRIDE, SIZE, CLIP = 3, 4, 32, math.log(1000.0 / 16)


class DecodingDetector(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=STRIDE, padding=1)
        self.deltas = nn.Conv2d(8, 4, 1)
        self.logits = nn.Conv2d(8, CLASSES, 1)
        side = SIZE // STRIDE
        ys, xs = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
        centers = (torch.stack([xs, ys], -1).reshape(-1, 2).float() + 0.5) * STRIDE
        self.register_buffer("anchors", torch.cat([centers - 5.0, centers + 5.0], -1))  # [A, 4]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        features = torch.relu(self.conv(x))
        rel_codes = self.deltas(features).flatten(2).transpose(1, 2)  # [B, A, 4]
        widths = self.anchors[:, 2] - self.anchors[:, 0]
        heights = self.anchors[:, 3] - self.anchors[:, 1]
        ctr_x = self.anchors[:, 0] + 0.5 * widths
        ctr_y = self.anchors[:, 1] + 0.5 * heights
        wx, wy, ww, wh = 10.0, 10.0, 5.0, 5.0  # BoxCoder's weights, as decode_single reads them
        dx = rel_codes[..., 0::4] / wx
        dy = rel_codes[..., 1::4] / wy
        dw = torch.clamp(rel_codes[..., 2::4] / ww, max=CLIP)
        dh = torch.clamp(rel_codes[..., 3::4] / wh, max=CLIP)
        pred_ctr_x = dx * widths[:, None] + ctr_x[:, None]
        pred_ctr_y = dy * heights[:, None] + ctr_y[:, None]
        half_w = 0.5 * torch.exp(dw) * widths[:, None]
        half_h = 0.5 * torch.exp(dh) * heights[:, None]
        boxes = torch.stack(
            (pred_ctr_x - half_w, pred_ctr_y - half_h, pred_ctr_x + half_w, pred_ctr_y + half_h), dim=-1
        ).flatten(-2)
        boxes_x = boxes[..., 0::2].clamp(min=0, max=SIZE)  # clip_boxes_to_image
        boxes_y = boxes[..., 1::2].clamp(min=0, max=SIZE)
        boxes = torch.stack((boxes_x, boxes_y), dim=-1).reshape(boxes.shape)
        scores = self.logits(features).flatten(2).transpose(1, 2).sigmoid()
        return fxdeploy.ops.multiclass_nms(boxes, scores, iou_threshold=0.5, score_threshold=0.3, keep_top_k=20)


@pytest.fixture(scope="module")
def lowered() -> tuple[nn.Module, fxdeploy.Deployed]:
    return lower_on_ncnn(DecodingDetector, SIZE)


def test_box_decoding_matches_eager_on_ncnn(lowered: tuple[nn.Module, fxdeploy.Deployed]) -> None:
    assert_matches_eager(*lowered, SIZE, score_atol=1e-4)


def test_the_decoding_runs_in_the_engine(lowered: tuple[nn.Module, fxdeploy.Deployed]) -> None:
    """The engine hands over decoded, clipped boxes: the strided slices did not push them to the host."""
    _, deployed = lowered
    assert "strided_slices" in deployed.report.fired
    anchors = (SIZE // STRIDE) ** 2
    heads = deployed.manifest["info"]["ncnn"]["stages"][0]["outputs"]
    assert sorted(h["shape"] for h in heads) == sorted([[anchors, 4], [anchors, CLASSES]])


def test_other_targets_keep_their_strided_slices() -> None:
    """Only the ncnn pipeline respells them: ONNX and TorchScript have stepped slices."""
    from fxdeploy.targets import get_target

    assert all("strided_slices" not in [p.__name__ for p in get_target(name).pipeline]
               for name in ("onnxruntime", "openvino", "tensorrt", "torchscript"))
