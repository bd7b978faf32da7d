"""A CenterNet-style head on ncnn, as CenterNet writes its decoding, with no substitution:

- the heatmap through CenterNet's ``_sigmoid`` (a sigmoid clamped to [1e-4, 1 - 1e-4]);
- the peaks kept by ``hmax = max_pool2d(heat, 3, 1, 1); keep = (hmax == heat).float(); heat * keep``,
  which pnnx leaves as ``torch.eq`` and ``Tensor.to``: ``comparisons_as_arithmetic`` spells them
  with layers ncnn has, so the engine runs them;
- the top-k peaks over all classes, their class, position and box (sizes and offsets gathered at
  the peaks), which ncnn has no layers for: the host runs them.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fxdeploy
from fxdeploy.partition import Host, Plan
from tests.helpers import require_target

CLASSES, K = 3, 16


class CenterNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
                                      nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())
        self.hm, self.wh, self.reg = nn.Conv2d(16, CLASSES, 1), nn.Conv2d(16, 2, 1), nn.Conv2d(16, 2, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        features = self.backbone(x)
        heat = torch.clamp(self.hm(features).sigmoid_(), min=1e-4, max=1 - 1e-4)
        hmax = F.max_pool2d(heat, 3, stride=1, padding=1)
        keep = (hmax == heat).float()
        heat = heat * keep
        batch, _, height, width = heat.shape
        scores, indices = torch.topk(heat.view(batch, -1), K)
        classes = indices // (height * width)
        pixels = indices % (height * width)
        ys, xs = (pixels // width).float(), (pixels % width).float()
        at = pixels[:, None, :].expand(batch, 2, K)
        sizes = self.wh(features).view(batch, 2, -1).gather(2, at)
        offsets = self.reg(features).view(batch, 2, -1).gather(2, at)
        cx, cy = xs + offsets[:, 0], ys + offsets[:, 1]
        half_w, half_h = sizes[:, 0] / 2, sizes[:, 1] / 2
        boxes = torch.stack([cx - half_w, cy - half_h, cx + half_w, cy + half_h], -1)
        return scores, classes, boxes


@pytest.fixture(scope="module")
def lowered() -> tuple[nn.Module, fxdeploy.Deployed]:
    require_target("ncnn")
    torch.manual_seed(0)
    model = CenterNet().eval()
    x = torch.randn(2, 3, 64, 64)
    return model, fxdeploy.lower(model, (x,), target="ncnn", dynamic_shapes={"x": {0: ("batch", 1, 4)}})


def test_centernet_peaks_run_in_the_engine_and_match_eager(lowered: tuple[nn.Module, fxdeploy.Deployed]) -> None:
    model, deployed = lowered
    assert "comparisons_as_arithmetic" in deployed.report.fired
    generator = torch.Generator().manual_seed(1)
    for batch in (1, 3):
        x = torch.randn(batch, 3, 64, 64, generator=generator)
        with torch.no_grad():
            want = model(x)
        got = deployed(x)
        assert (want[0] > 0.05).all(), "every one of the top K is a peak, not a suppressed zero"
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=1e-5)
        assert torch.equal(got[1], want[1])
        torch.testing.assert_close(got[2], want[2], rtol=1e-5, atol=1e-4)


def test_only_the_top_k_decoding_runs_on_the_host(lowered: tuple[nn.Module, fxdeploy.Deployed]) -> None:
    _, deployed = lowered
    plan = Plan.from_dict(deployed.manifest["info"]["ncnn"], [s["name"] for s in deployed.manifest["inputs"]])
    host_ops = {op.op for stage in plan.stages if isinstance(stage.work, Host) for op in stage.work.ops}
    assert "aten.topk.default" in host_ops
    assert not {"aten.eq.Tensor", "aten.to.dtype", "aten.max_pool2d.default", "aten.sigmoid.default"} & host_ops
