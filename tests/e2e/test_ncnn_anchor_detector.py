"""An anchor-based detector on ncnn: what torchvision's detectors do around their NMS, in small.

- anchors made in ``forward`` from aranges over the static feature size (AnchorGenerator);
- a candidate selection before the NMS: per class, the scores below the k-th best zeroed
  (``topk``, a slice of its values, ``ge``, ``where``, ``zeros_like``), none of which ncnn has;
- after the NMS, boxes scaled by a 0-d ratio of two ``torch.tensor`` sizes (the transform's
  ``postprocess``).

ncnn runs one image at a time and hands over per-image outputs, so the input-free values the tail
needs are recomputed on the host, and the candidate selection moves there with the NMS.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import fxdeploy
from fxdeploy.passes import op_histogram
from tests.e2e.ncnn_detectors import assert_matches_eager, lower_on_ncnn, ncnn_stages

CLASSES, TOP_K, KEEP, STRIDE = 3, 12, 20, 4


class AnchorDetector(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=STRIDE, padding=1)
        self.head = nn.Conv2d(8, 4 + CLASSES, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.head(torch.relu(self.conv(x))).flatten(2).transpose(1, 2)  # [B, A, 4 + C]
        height, width = x.shape[2] // STRIDE, x.shape[3] // STRIDE
        ys, xs = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
        centers = (torch.stack([xs, ys], -1).reshape(1, -1, 2).float() + 0.5) * STRIDE
        anchors = torch.cat([centers - 6.0, centers + 6.0], -1)  # [1, A, 4], from no input
        boxes = anchors + out[..., :4] * 2.0
        scores = out[..., 4:].sigmoid()
        kth = scores.topk(TOP_K, dim=1).values[:, -1:, :]  # per image and class
        scores = torch.where(scores >= kth, scores, torch.zeros_like(scores))
        det_boxes, det_scores, labels, num = fxdeploy.ops.multiclass_nms(
            boxes, scores, iou_threshold=0.5, score_threshold=0.2, keep_top_k=KEEP
        )
        ratio = torch.tensor(64.0) / torch.tensor(32.0)  # original size over the network's
        return det_boxes * ratio, det_scores, labels, num


@pytest.fixture(scope="module")
def lowered() -> tuple[nn.Module, fxdeploy.Deployed]:
    return lower_on_ncnn(AnchorDetector, 32)


def test_anchor_detector_matches_eager_on_ncnn(lowered: tuple[nn.Module, fxdeploy.Deployed]) -> None:
    assert_matches_eager(*lowered, 32, score_atol=1e-3)


def test_the_engine_hands_over_raw_boxes_and_scores_only(lowered: tuple[nn.Module, fxdeploy.Deployed]) -> None:
    """Per image (ncnn's blobs have no batch): [A, 4] boxes and [A, C] scores, nothing input-free."""
    _, deployed = lowered
    anchors = (32 // STRIDE) ** 2
    heads = deployed.manifest["info"]["ncnn"]["stages"][0]["outputs"]
    assert sorted(h["shape"] for h in heads) == sorted([[anchors, 4], [anchors, CLASSES]])
    assert "host_postprocess_split" in deployed.report.fired


def test_the_tail_holds_the_selection(lowered: tuple[nn.Module, fxdeploy.Deployed]) -> None:
    del lowered
    torch.manual_seed(0)
    _, _, parts = ncnn_stages(AnchorDetector(), torch.randn(2, 3, 32, 32))
    head, tail = op_histogram(parts.head), op_histogram(parts.tail)
    for op in ("aten.topk.default", "aten.ge.Tensor", "aten.where.self"):
        assert op in tail and op not in head, op
    assert "aten.zeros_like.default" not in head  # at a static size, a constant (fold_constants)
    assert "aten.div.Tensor" not in head  # the 0-d ratio: a constant at a static size
