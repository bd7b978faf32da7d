"""exact_score_sigmoid: the sigmoid that makes NMS scores is spelt 1 / (1 + exp(-x)) on ONNX
Runtime, whose own Sigmoid does not saturate where torch's does; a sigmoid inside the network stays."""

from __future__ import annotations

import torch

import fxdeploy
from fxdeploy.passes import op_histogram
from fxdeploy.passes.exact_score_sigmoid import check, exact_score_sigmoid
from fxdeploy.settings import Settings
from tests.helpers import require_target
from tests.passes.graphs import applied


class GatedHead(torch.nn.Module):
    """A squeeze-excitation gate (a sigmoid inside the network), then class scores by a sigmoid."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = torch.nn.Conv2d(4, 4, 1)
        self.cls = torch.nn.Conv2d(4, 3, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = x * torch.sigmoid(self.gate(x.mean((2, 3), keepdim=True)))
        scores = torch.sigmoid(self.cls(x)).flatten(2).transpose(1, 2)  # [B, HW, C]
        n = scores.shape[1]
        corner = torch.arange(n, dtype=torch.float32).mul(0.5).view(1, n, 1).expand(x.shape[0], n, 2)
        boxes = torch.cat([corner, corner + 4.0], 2)  # overlapping boxes, one per position
        return fxdeploy.ops.multiclass_nms(boxes, scores, iou_threshold=0.5, score_threshold=0.5, keep_top_k=20)


def _graph(model: torch.nn.Module, x: torch.Tensor) -> torch.fx.GraphModule:
    return torch.export.export(model, (x,)).module(check_guards=False)  # parameters as attributes


def _saturating(batch: int = 2) -> tuple[GatedHead, torch.Tensor]:
    """Class logits between 14 and 20: torch's sigmoid is exactly 1.0 for most, a tie for NMS."""
    torch.manual_seed(0)
    model = GatedHead().eval()
    with torch.no_grad():
        model.cls.weight.mul_(0.2)
        model.cls.bias.fill_(17.0)
    return model, torch.randn(batch, 4, 6, 6) * 3


def test_only_the_score_sigmoid_is_respelt() -> None:
    model, x = _saturating()
    gm = _graph(model, x)
    assert op_histogram(gm)["aten.sigmoid.default"] == 2
    gm = applied(exact_score_sigmoid, gm)
    ops = op_histogram(gm)
    assert ops["aten.sigmoid.default"] == 1, "the gate's sigmoid stays"
    assert ops["aten.reciprocal.default"] == 1 and ops["aten.exp.default"] == 1
    with torch.no_grad():
        want, got = model(x), gm(x)
    for w, g in zip(want, got, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-7)


def test_no_nms_no_change() -> None:
    gm = _graph(torch.nn.Sigmoid(), torch.randn(3, 4))
    assert not exact_score_sigmoid(gm, Settings()).modified
    assert op_histogram(gm)["aten.sigmoid.default"] == 1


def test_check_says_why() -> None:
    gm = _graph(torch.nn.ReLU(), torch.randn(3, 4))
    relu = next(n for n in gm.graph.nodes if n.op == "call_function")
    assert "is not aten.sigmoid" in check(relu)


def test_saturated_ties_keep_the_lower_index_on_onnxruntime() -> None:
    """Most scores are exactly 1.0 in torch: NMS keeps the lower index of two overlapping tied
    boxes. With ONNX Runtime's own Sigmoid, 0.9999999 against 1.0 keeps another set."""
    require_target("onnxruntime")
    model, x = _saturating(batch=2)
    with torch.no_grad():
        want = model(x)
    assert (want[1] == 1.0).sum() >= 4, "the check needs tied, saturated scores"
    deployed = fxdeploy.lower(model, (x,), target="onnxruntime")
    got = deployed(x)
    for w, g in zip(want, got, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-6)
    assert "exact_score_sigmoid" in deployed.report.fired
