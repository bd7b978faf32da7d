"""running_extrema: torch.cummax and torch.cummin spelt with a masked reduction."""

from __future__ import annotations

import math

import pytest
import torch

import fxdeploy
from fxdeploy.passes import op_histogram
from fxdeploy.passes.running_extrema import check, running_extrema
from fxdeploy.settings import Settings
from tests.helpers import require_target
from tests.passes.graphs import applied

NAN = float("nan")


class Running(torch.nn.Module):
    def __init__(self, op: object, dim: int) -> None:
        super().__init__()
        self.op, self.dim = op, dim

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        result = self.op(x, self.dim)
        return result.values, result.indices


def _graph(model: torch.nn.Module, x: torch.Tensor, shapes: object = None) -> torch.fx.GraphModule:
    return torch.export.export(model, (x,), dynamic_shapes=shapes).run_decompositions({}).module(check_guards=False)


def _inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [
        torch.tensor([[1.0, 3, 3, 2, 3, 5], [1, NAN, 2, NAN, 0, 7]]),  # ties; NaN, then NaN again
        torch.tensor([[-math.inf, -math.inf, 0.0, math.inf, math.inf, NAN, -0.0, 0.0]]),
        torch.randn(3, 5, 7, generator=g).round(),  # many ties
        torch.randint(-3, 3, (3, 5, 4), generator=g),
        torch.randint(0, 2, (4, 6), generator=g).bool(),
        torch.tensor([torch.iinfo(torch.int64).min, 0, torch.iinfo(torch.int64).max]),
        torch.randn(2, 9, generator=g).half(),
    ]


@pytest.mark.parametrize("op", [torch.cummax, torch.cummin])
@pytest.mark.parametrize("case", range(7))
def test_values_and_indices_are_torchs_along_every_dim(op: object, case: int) -> None:
    """The index is that of the last element equal to the value; NaN wins, and NaN ties NaN."""
    x = _inputs()[case]
    for dim in range(-x.dim(), x.dim()):
        model = Running(op, dim)
        gm = applied(running_extrema, _graph(model, x))
        assert not any(name in k for k in op_histogram(gm) for name in ("cummax", "cummin")), op_histogram(gm)
        for want, got in zip(model(x), gm(x), strict=True):
            assert want.dtype == got.dtype and want.shape == got.shape
            assert torch.equal(want.isnan(), got.isnan()) if want.is_floating_point() else True
            assert torch.equal(want[~want.isnan()] if want.is_floating_point() else want,
                               got[~got.isnan()] if got.is_floating_point() else got), (dim, want, got)


@pytest.mark.parametrize("op", [torch.cummax, torch.cummin])
def test_a_zero_keeps_the_sign_eager_gives_it(op: object) -> None:
    """torch keeps the last of equal values, -0.0 or 0.0; a max over the two may give either."""
    x = torch.tensor([[-0.0, 0.0, -0.0, 1.0, -0.0], [0.0, -0.0, 0.0, -0.0, -1.0]])
    model = Running(op, 1)
    gm = applied(running_extrema, _graph(model, x))
    (want, want_at), (got, got_at) = model(x), gm(x)
    assert torch.equal(want_at, got_at) and torch.equal(want.signbit(), got.signbit()), (want, got)


def test_what_stays_says_why() -> None:
    dynamic = _graph(Running(torch.cummax, 1), torch.randn(2, 5), ({1: torch.export.Dim("n", min=2, max=64)},))
    node = next(n for n in dynamic.graph.nodes if "cummax" in str(n.target))
    assert check(node) == "the running dim is dynamic or empty: the mask needs its size"
    large = _graph(Running(torch.cummin, 1), torch.randn(64, 4096))
    node = next(n for n in large.graph.nodes if "cummin" in str(n.target))
    assert "grid holds 1073741824 values" in check(node)
    assert not running_extrema(large, Settings()).modified


def test_a_dynamic_batch_keeps_its_rows_apart() -> None:
    model = Running(torch.cummax, -1)
    gm = applied(running_extrema, _graph(model, torch.randn(3, 6), ({0: torch.export.Dim("b", min=1, max=16)},)))
    x = torch.randn(11, 6).round()
    for want, got in zip(model(x), gm(x), strict=True):
        assert torch.equal(want, got)


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_a_best_so_far_score_runs_on_the_onnx_runtimes(target: str) -> None:
    """Before: torch.onnx had no cummax, and lower() refused the model."""
    require_target(target)

    class BestSoFar(torch.nn.Module):
        def forward(self, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            best, at = (scores * 0.5).cummax(1)
            low = torch.cummin(scores, 1).values
            return best, at, low

    model = BestSoFar().eval()
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(3, 40, generator=g) * 4).round()  # ties
    deployed = fxdeploy.lower(model, (x,), target=target, dynamic_shapes={"scores": {0: ("batch", 1, 8)}})
    assert "running_extrema" in deployed.report.fired
    for batch in (1, 8):
        y = (torch.randn(batch, 40, generator=g) * 4).round()
        y[0, 5] = NAN
        got, want = deployed(y), model(y)
        for w, o in zip(want, got, strict=True):
            assert torch.equal(w.isnan(), o.isnan()) if w.is_floating_point() else True
            torch.testing.assert_close(o, w, rtol=0, atol=0, equal_nan=True)
