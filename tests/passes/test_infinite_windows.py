"""infinite_windows: a max over windows the graph can fill with -inf is guarded to -inf where a
window holds only -inf; in torch the rewrite is the identity (padding and NaN included)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fxdeploy.passes import op_histogram
from fxdeploy.passes.infinite_windows import check, infinite_windows, infinities
from fxdeploy.settings import Settings
from tests.passes.graphs import applied


def _graph(fn: object, *inputs: torch.Tensor) -> torch.fx.GraphModule:
    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 3, 1)

        def forward(self, *args: torch.Tensor) -> object:
            return fn(self, *args)

    return torch.export.export(Model().eval(), inputs).run_decompositions({}).module(check_guards=False)


def _maxes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    names = ("max_pool2d", "max_pool2d_with_indices", "amax", "max", "amin", "min")
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target.__name__.split(".")[0] in names]


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(0))
    x[1, 2, 0, 0] = float("nan")
    mask = torch.zeros(2, 3, 6, 6, dtype=torch.bool)
    mask[0, 0, :3, :3] = mask[0, 1] = mask[1, 2, 5] = True
    return x, mask


def _masked_maxes(m: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y, z = x.masked_fill(mask, float("-inf")), x.masked_fill(mask, float("inf"))
    return (F.max_pool2d(y, 3, 1, 1), F.max_pool2d(y, 3, 2, ceil_mode=True), F.max_pool2d(y, 2, return_indices=True),
            y.amax(-1), y.max(-1), y.max(), z.amin((-2, -1), keepdim=True), z.min(-1), z.min(), (-y).amin(-1))


def test_masked_maxes_are_guarded_and_keep_torchs_values() -> None:
    x, mask = _inputs()
    gm = _graph(_masked_maxes, x, mask)
    assert all(check(n, infinities(gm)) is None for n in _maxes(gm))
    gm = applied(infinite_windows, gm)
    assert op_histogram(gm)["aten.where.ScalarSelf"] == 10
    want = _masked_maxes(None, x, mask)
    for got, w in zip(gm(x, mask), want, strict=True):
        got, w = (got, w) if isinstance(w, torch.Tensor) else (got[0], w[0])
        assert torch.equal(got.isnan(), w.isnan()) and torch.equal(got.nan_to_num(), w.nan_to_num())


@pytest.mark.parametrize(("fn", "reason"), [
    (lambda m, x: F.max_pool2d(F.silu(m.conv(x.log())), 5, 1, 2), "no -inf reaches"),  # YOLO's SPPF, log upstream
    (lambda m, x: F.max_pool2d(m.conv(x), 3, 1, 1), "no -inf reaches"),  # a model input is taken as finite
    (lambda m, x: x.clamp(min=-1e30).masked_fill(x > 0, -1e30).amax(-1), "no -inf reaches"),
    (lambda m, x: (x > 0).max(), "not a float"),
])
def test_maxes_no_neg_inf_reaches_stay(fn: object, reason: str) -> None:
    gm = _graph(fn, torch.rand(1, 3, 6, 6))
    holds = infinities(gm)
    assert all(reason in check(n, holds) for n in _maxes(gm)), [check(n, holds) for n in _maxes(gm)]
    assert not infinite_windows(gm, Settings()).modified


def test_what_makes_neg_inf_of_finite_values() -> None:
    def fn(m: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (x.log().amax(-1), (x / 255).amax(-1), (1 / x).amax(-1), x.pow(2).amax(-1), x.pow(-1).amax(-1),
                x.log().relu().amax(-1), torch.full_like(x, float("inf")).neg().amax(-1))

    gm = _graph(fn, torch.rand(1, 3, 6, 6))
    holds = infinities(gm)
    assert [check(n, holds) is None for n in _maxes(gm)] == [True, False, True, False, True, False, True]


def test_a_min_follows_an_infinity_of_either_sign() -> None:
    """A min reads +inf where the graph makes either infinity (a negation, ``abs`` or a subtraction
    turns -inf into +inf); only bounded ops end that, so ``relu``, which ends -inf, does not."""
    def fn(m: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (x.log().neg().amin(-1), x.log().abs().amin(-1), (1 / x).relu().amin(-1), x.log().sigmoid().amin(-1),
                x.log().clamp(-5, 5).amin(-1), x.log().clamp(min=-5).amin(-1), m.conv(x).amin(-1),
                torch.lgamma(x).amin(-1))

    gm = _graph(fn, torch.rand(1, 3, 6, 6))
    holds = infinities(gm)
    assert [check(n, holds) is None for n in _maxes(gm)] == [True, True, True, False, False, True, False, True]
