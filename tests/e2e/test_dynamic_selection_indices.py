"""Indices of a selection over rows the input dims decide (``nonzero`` of a score mask at a dynamic
H and W): padded at the most rows the dims allow, the padding's indices ran past the rows of the
image at hand, and ``boxes[keep]`` failed in ONNX Runtime ("GatherND ... invalid index") and
TorchScript at the example's own size. They now stay in range (``padding/selections.py``)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import fxdeploy
from fxdeploy import ops
from tests.detections import assert_same_detections
from tests.helpers import require_target


class AnchorDetector(nn.Module):
    """A conv head over an 8-pixel grid, anchors made in forward, kept by index, one NMS."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.head = nn.Conv2d(3, 5, 8, stride=8)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        p = self.head(x).flatten(2).transpose(1, 2)[0]  # [h * w, 5]
        h, w = x.shape[2] // 8, x.shape[3] // 8
        cy, cx = torch.meshgrid(torch.arange(h) * 8.0 + 4, torch.arange(w) * 8.0 + 4, indexing="ij")
        centers = torch.stack([cx, cy], -1).reshape(-1, 2) + p[:, :2].tanh() * 4
        half = p[:, 2:4].exp().clamp(max=3) * 6
        boxes, scores = torch.cat([centers - half, centers + half], 1), p[:, 4].sigmoid()
        keep = (scores > 0.45).nonzero().flatten()
        b, s, labels = boxes[keep], scores[keep], (p[:, 0] > 0).long()[keep]
        kept = ops.nms(b, s, 0.5)[:20]
        return {"boxes": b[kept], "scores": s[kept], "labels": labels[kept]}


@pytest.mark.parametrize("target", ["onnxruntime", "torchscript", "openvino"])
def test_selected_indices_at_a_dynamic_size_stay_in_range(target: str) -> None:
    require_target(target)
    model = AnchorDetector().eval()
    h, w = torch.export.Dim("h", min=4, max=16), torch.export.Dim("w", min=4, max=16)
    example = torch.rand(1, 3, 64, 96, generator=torch.Generator().manual_seed(0))
    deployed = fxdeploy.lower(model, (example,), target=target, dynamic_shapes={"x": {2: 8 * h, 3: 8 * w}})
    for seed, (height, width) in enumerate([(64, 96), (96, 64), (128, 128), (32, 48)]):
        x = torch.rand(1, 3, height, width, generator=torch.Generator().manual_seed(seed + 1))
        with torch.no_grad():
            want = model(x)
        got = deployed(x)
        assert len(want["scores"]) > 2
        assert_same_detections([want], [got])
