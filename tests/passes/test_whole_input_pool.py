"""whole_input_pool: an average pool whose one window covers the whole input becomes a mean."""

from __future__ import annotations

import pytest
import torch

from fxdeploy.passes import op_histogram
from fxdeploy.passes.whole_input_pool import check, whole_input_pool
from fxdeploy.settings import Settings
from tests.passes.graphs import applied


def _graph(pool: torch.nn.Module, x: torch.Tensor) -> torch.fx.GraphModule:
    return torch.export.export(torch.nn.Sequential(pool), (x,)).module(check_guards=False)


def _pool(gm: torch.fx.GraphModule) -> torch.fx.Node:
    return next(n for n in gm.graph.nodes if n.op == "call_function" and "avg_pool2d" in str(n.target))


@pytest.mark.parametrize("include_pad", [True, False])
@pytest.mark.parametrize("size", [(3, 3), (2, 5), (7, 7)])
def test_efficientnets_pooler_becomes_a_mean(size: tuple[int, int], include_pad: bool) -> None:
    """transformers' EfficientNet: AvgPool2d(1280, ceil_mode=True) over a small map."""
    x = torch.randn(2, 8, *size)
    pool = torch.nn.AvgPool2d(1280, ceil_mode=True, count_include_pad=include_pad)
    gm = _graph(pool, x)
    assert op_histogram(gm) == {"aten.avg_pool2d.default": 1}
    gm = applied(whole_input_pool, gm)
    assert op_histogram(gm) == {"aten.mean.dim": 1}
    torch.testing.assert_close(gm(x), pool(x), rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("pool", "reason"),
    [
        (torch.nn.AvgPool2d(2), "does not cover the input"),
        (torch.nn.AvgPool2d(8, padding=1, ceil_mode=True), "padded"),
        (torch.nn.AvgPool2d(8, ceil_mode=True, divisor_override=3), "divisor override"),
    ],
)
def test_other_pools_stay(pool: torch.nn.Module, reason: str) -> None:
    x = torch.randn(1, 4, 6, 6)
    gm = _graph(pool, x)
    assert reason in check(_pool(gm))
    assert not whole_input_pool(gm, Settings()).modified


def _dynamic(pool: torch.nn.Module, low: int = 2) -> torch.fx.GraphModule:
    x = torch.randn(1, 4, 6, 6)
    h = torch.export.Dim("h", min=low, max=8)
    return torch.export.export(torch.nn.Sequential(pool), (x,), dynamic_shapes=({2: h},)).module(check_guards=False)


def test_a_dynamic_size_the_window_covers_at_its_max_becomes_a_mean() -> None:
    gm = _dynamic(torch.nn.AvgPool2d(8, ceil_mode=True))  # h in [2, 8]
    assert whole_input_pool(gm, Settings()).modified
    gm.recompile()
    for h in (2, 5, 8):
        x = torch.randn(1, 4, h, 6)
        torch.testing.assert_close(gm(x), torch.nn.AvgPool2d(8, ceil_mode=True)(x), rtol=0, atol=1e-6)


def test_a_dynamic_size_past_the_window_stays() -> None:
    gm = _dynamic(torch.nn.AvgPool2d(2), low=4)  # several windows at every h
    assert "does not cover the input" in check(_pool(gm))
