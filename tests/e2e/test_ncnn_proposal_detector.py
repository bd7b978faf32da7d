"""A two-stage detector's proposal step on ncnn: what torchvision's Faster R-CNN does, in small.

The region proposal network takes the top-k objectness per level (``topk``), offsets each level's
indices into the concatenated anchors (integer arithmetic on the top-k's indices), gathers the
decoded proposals and their logits, and then computes on what it gathered: a sigmoid, a clip, a
minimum size, a where. Only then the NMS, and a second stage on the kept boxes.

Everything between the top-k and the NMS reads host values only and feeds the host only, so it
runs on the host with them: the plan is one engine and one host stage. Before, the arithmetic on
gathered values (no host-only op) stayed on an engine, giving an engine stage that read the
top-k's output tuple (a LoweringError, ``no batch dim``) and a small engine stage of sigmoids and
clips between two host stages.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import fxdeploy
from fxdeploy.passes import op_histogram
from tests.e2e.ncnn_detectors import assert_matches_eager, lower_on_ncnn, ncnn_stages

SIZE, KEEP = 32, 16
LEVELS = ((4, 6), (8, 4))  # (stride, top-k) per level


class ProposalDetector(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, stride=4, padding=1)
        self.down = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.objectness = nn.Conv2d(8, 1, 1)
        self.deltas = nn.Conv2d(8, 4, 1)
        self.refine = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        features = [torch.relu(self.stem(x))]
        features.append(torch.relu(self.down(features[0])))
        logits, proposals, picked, offset = [], [], [], 0
        for (stride, k), feature in zip(LEVELS, features, strict=True):
            height, width = feature.shape[2:]
            ys, xs = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
            centers = (torch.stack([xs, ys], -1).reshape(1, -1, 2).float() + 0.5) * stride
            anchors = torch.cat([centers - stride, centers + stride], -1)
            level_logits = self.objectness(feature).flatten(1)  # [B, A]
            logits.append(level_logits)
            proposals.append(anchors + self.deltas(feature).flatten(2).transpose(1, 2) * stride)
            picked.append(level_logits.topk(k, dim=1).indices + offset)  # into the concatenation
            offset += level_logits.shape[1]
        top = torch.cat(picked, 1)
        scores = torch.cat(logits, 1).gather(1, top).sigmoid()
        boxes = torch.cat(proposals, 1).gather(1, top.unsqueeze(-1).expand(-1, -1, 4)).clamp(0, SIZE)
        big = (boxes[..., 2] - boxes[..., 0] >= 1.0) & (boxes[..., 3] - boxes[..., 1] >= 1.0)
        scores = torch.where(big, scores, torch.zeros_like(scores)).unsqueeze(-1)
        det_boxes, det_scores, labels, num = fxdeploy.ops.multiclass_nms(
            boxes, scores, iou_threshold=0.5, score_threshold=0.05, keep_top_k=KEEP
        )
        refined = det_boxes + self.refine(det_boxes) * det_scores.unsqueeze(-1)  # padding rows stay zero
        return refined, det_scores, labels, num


@pytest.fixture(scope="module")
def lowered() -> tuple[nn.Module, fxdeploy.Deployed]:
    return lower_on_ncnn(ProposalDetector, SIZE)


def test_proposal_detector_matches_eager_on_ncnn(lowered: tuple[nn.Module, fxdeploy.Deployed]) -> None:
    assert_matches_eager(*lowered, SIZE, score_atol=1e-4)


def test_one_engine_then_the_host(lowered: tuple[nn.Module, fxdeploy.Deployed]) -> None:
    """The engine hands over per-image values: each level's logits (the top-k reads them), and
    all logits and proposals (the gathers read them)."""
    _, deployed = lowered
    plan = deployed.manifest["info"]["ncnn"]
    assert [stage["kind"] for stage in plan["stages"]] == ["engine", "host"]
    cells = [(SIZE // stride) ** 2 for stride, _ in LEVELS]
    shapes = sorted(output["shape"] for output in plan["stages"][0]["outputs"])
    assert shapes == sorted([[c] for c in cells] + [[sum(cells)], [sum(cells), 4]])


def test_the_host_computes_on_what_it_gathered() -> None:
    torch.manual_seed(0)
    _, _, parts = ncnn_stages(ProposalDetector(), torch.randn(2, 3, SIZE, SIZE))
    assert [stage.kind for stage in parts.stages] == ["engine", "host"]
    head, tail = op_histogram(parts.head), op_histogram(parts.tail)
    for op in ("aten.topk.default", "aten.gather.default", "aten.sigmoid.default", "aten.clamp.default",
               "aten.linear.default"):
        assert op in tail and op not in head, op
    assert "aten.add.Tensor" in tail  # the level offset on the top-k's indices
    assert "aten.conv2d.default" in head
