"""A max over windows the model fills with -inf is -inf where a window holds only -inf, as in eager
(``infinite_windows``). Before, ONNX Runtime's padded MaxPool and OpenVINO's MaxPool and ReduceMax
gave -3.4028235e38 there, which a ``where(isinf(m), 0, m)`` guard let through; lower()'s check, on
an example without such a window, passed them.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import fxdeploy
from tests.helpers import require_target

TARGETS = ("onnxruntime", "openvino", "torchscript")


class MaskedMaxes(torch.nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x.masked_fill(mask, float("-inf"))
        z = torch.where(mask, float("-inf"), x)
        padded = F.max_pool2d(y, 3, 1, 1)
        guarded = torch.where(torch.isinf(padded), torch.zeros_like(padded), padded)
        pooled, _ = F.max_pool2d(z, 2, return_indices=True)
        return (guarded, padded, pooled, F.max_pool2d(y, 3, 2, ceil_mode=True), F.max_pool1d(z.flatten(2), 4),
                y.amax(-1), y.max(-1).values, y[:, 1].max())


class MaskedMinima(torch.nn.Module):
    """The nearest valid entry's distance per row, and per image; an empty row gives +inf."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        distance = x.abs().masked_fill(mask, float("inf"))
        nearest = distance.amin(-1)
        return (torch.where(torch.isinf(nearest), torch.full_like(nearest, -1.0), nearest), distance.min(-1).values,
                distance.min(-1).indices, distance.amin((-2, -1)), distance[:, 1].min())


class LogMaxes(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = torch.log(torch.relu(x))
        return F.max_pool2d(y, 3, 1, 1), y.amax((-2, -1))


def _masks() -> tuple[torch.Tensor, torch.Tensor]:
    """An ordinary example mask (one element), and one that masks whole windows, rows and a channel."""
    example = torch.zeros(2, 3, 6, 6, dtype=torch.bool)
    example[0, 0, 0, 0] = True
    edge = torch.zeros(2, 3, 6, 6, dtype=torch.bool)
    edge[0, 0, :3, :3] = True
    edge[0, 2, 4] = True
    edge[1, 1] = True
    return example, edge


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("model", [MaskedMaxes(), MaskedMinima()], ids=["maxes_neg_inf", "minima_inf"])
def test_windows_masked_whole_give_the_infinity(model: torch.nn.Module, target: str) -> None:
    require_target(target)
    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, 6)
    example, edge = _masks()
    deployed = fxdeploy.lower(model, (x, example), target=target)
    for got, want in zip(deployed(x, edge), model(x, edge), strict=True):
        assert torch.equal(got, want), (got, want)


@pytest.mark.parametrize("target", TARGETS)
def test_windows_of_log_zero_are_neg_inf(target: str) -> None:
    require_target(target)
    torch.manual_seed(0)
    model = LogMaxes()
    deployed = fxdeploy.lower(model, (torch.rand(1, 2, 5, 5) + 0.5,), target=target)
    x = torch.rand(1, 2, 5, 5) + 0.5
    x[0, 0, :2, :2] = -1.0  # relu -> 0, log -> -inf: the corner window is -inf only
    x[0, 1] = 0.0
    for got, want in zip(deployed(x), model(x), strict=True):
        assert torch.equal(got.isneginf(), want.isneginf()), (got, want)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)  # ONNX Runtime's Log is not torch's to the bit


class MaskedFeatures(torch.nn.Module):
    """A feature map masked with -inf, pooled with padding, the infinities zeroed, then a conv; and
    the nearest masked-in distance of its output per row."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.head = torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.Conv2d(4, 4, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        pooled = F.max_pool2d(self.stem(x).masked_fill(mask, float("-inf")), 3, 1, 1)
        features = self.head(torch.where(torch.isinf(pooled), torch.zeros_like(pooled), pooled))
        distance = features.abs().masked_fill(mask, float("inf"))
        return features, distance.min(-1).values, distance.amin((-2, -1))


def test_ncnn_takes_maxes_and_mins_over_infinite_windows_on_the_host() -> None:
    """ncnn's padded pooling and its min give the largest finite float over a window of infinities
    only (1.5e38 off in ``features``): those ops run on the host, each with its reason."""
    require_target("ncnn")
    from fxdeploy.cli.report import render_report

    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, 6)
    example, edge = (m.expand(2, 4, 6, 6).clone() for m in (torch.zeros(2, 1, 6, 6, dtype=torch.bool),) * 2)
    example[0, 0, 0, 0] = True
    edge[0, 0, :3, :3] = edge[0, 2, 4] = edge[1, 1] = True
    model = MaskedFeatures().eval()
    deployed = fxdeploy.lower(model, (x, example), target="ncnn")
    for got, want in zip(deployed(x, edge), model(x, edge), strict=True):
        assert torch.equal(got.isinf(), want.isinf()) and got.isinf().any() == want.isinf().any()
        torch.testing.assert_close(got[~want.isinf()], want[~want.isinf()], rtol=1e-5, atol=1e-5)
    report = render_report(deployed)
    for op in ("aten.max_pool2d.default", "aten.min.dim", "aten.amin.default"):
        assert f"`{op}`: the graph can fill its windows with an infinity" in report, report
