"""value_lookups: ``isin`` and ``searchsorted`` over a constant sorted sequence as comparisons."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import fxdeploy
from fxdeploy.passes import op_histogram
from fxdeploy.passes.graph_utils import written_in_place
from fxdeploy.passes.value_lookups import check, value_lookups
from fxdeploy.settings import Settings
from tests.helpers import require_target
from tests.passes.graphs import applied

NAN, INF = float("nan"), float("inf")
EDGES = torch.tensor([-1.0, 0.0, 0.0, 0.5, 2.0])
"""Sorted, with a repeated edge: left and right searches differ there."""
ROWS = torch.tensor([[-1.0, 0.0, 1.0], [0.0, 0.0, 3.0]])


class Fn(torch.nn.Module):
    def __init__(self, fn: Callable[..., object]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> object:
        return self.fn(x)


VALUES = torch.tensor([[-2.0, -1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 2.0, 3.0, NAN, INF, -INF]] * 2)
CASES: dict[str, Callable[[torch.Tensor], object]] = {
    "left": lambda x: torch.searchsorted(EDGES, x),
    "right": lambda x: torch.searchsorted(EDGES, x, right=True),
    "side": lambda x: torch.searchsorted(EDGES, x, side="right", out_int32=True),
    "rows": lambda x: torch.searchsorted(ROWS, x),
    "bucketize_int": lambda x: torch.searchsorted(torch.tensor([0, 2, 2, 5]), x.nan_to_num(0).clamp(-9, 9).long()),
    "isin": lambda x: torch.isin(x, torch.tensor([0.0, 0.5, NAN, INF])),
    "isin_invert": lambda x: torch.isin(x, torch.tensor([[2.0], [-1.0]]), invert=True),
    "isin_scalar": lambda x: torch.isin(x, 0.5),
    "isin_graph": lambda x: torch.isin(x, x[0] * 2),  # test elements the graph computes
    "isin_int": lambda x: torch.isin(x.nan_to_num(0).clamp(-9, 9).long(), torch.tensor([0, 1, 3])),
}


def _graph(fn: Callable[[torch.Tensor], object], x: torch.Tensor) -> torch.fx.GraphModule:
    from fxdeploy.passes.remove_noops import remove_noops

    gm = torch.export.export(Fn(fn), (x,)).run_decompositions({}).module(check_guards=False)  # functional, as captured
    remove_noops(gm, Settings())  # as in every pipeline, before this pass
    gm.recompile()
    return gm


@pytest.mark.parametrize("case", list(CASES))
def test_lookups_become_comparisons_with_torchs_values(case: str) -> None:
    fn = CASES[case]
    gm = applied(value_lookups, _graph(fn, VALUES))
    assert not any("searchsorted" in k or "isin" in k for k in op_histogram(gm)), op_histogram(gm)
    want, got = fn(VALUES), gm(VALUES)
    assert got.dtype == want.dtype and torch.equal(got, want), (got, want)
    random = torch.randn(2, 12, generator=torch.Generator().manual_seed(0)).round(decimals=1)
    assert torch.equal(gm(random), fn(random))


@pytest.mark.parametrize(
    ("fn", "reason"),
    [
        (lambda x: torch.searchsorted(x.cumsum(1), x), "not a constant"),
        (lambda x: torch.searchsorted(torch.tensor([0.0, 2.0, 1.0]), x), "not sorted"),
        (lambda x: torch.searchsorted(torch.tensor([0.0, 1.0, NAN]), x), "holds NaN"),
        (lambda x: torch.searchsorted(torch.tensor([2.0, 0.0]), x, sorter=torch.tensor([1, 0])), "sorter"),
        (lambda x: torch.isin(x, torch.arange(5000.0)), "too large"),
    ],
)
def test_lookups_it_cannot_prove_stay(fn: Callable[[torch.Tensor], object], reason: str) -> None:
    gm = _graph(fn, VALUES)
    node = next(n for n in gm.graph.nodes if "searchsorted" in str(n.target) or "isin" in str(n.target))
    assert reason in check(gm, node, written_in_place(gm.graph))
    assert not value_lookups(gm, Settings()).modified


class ClassFilter(torch.nn.Module):
    """Detections kept by class and binned by score, as a user's postprocess writes it."""

    def forward(self, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        best, labels = scores.max(-1)
        wanted = torch.isin(labels, torch.tensor([1, 3, 4]))
        bins = torch.bucketize(best, torch.tensor([0.25, 0.5, 0.75]), right=True)
        level = torch.searchsorted(torch.tensor([0.1, 0.3, 0.3, 0.9]), best)
        return wanted, bins, level


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_a_class_filter_runs_on_the_onnx_runtimes(target: str) -> None:
    """Before: torch.onnx had no searchsorted (isin is written through one), so lower() refused."""
    require_target(target)
    model = ClassFilter()
    x = torch.rand(2, 50, 6, generator=torch.Generator().manual_seed(0))
    x[:, :5] = torch.tensor([0.1, 0.3, 0.25, 0.9, 0.5, 0.75])  # scores on the edges
    deployed = fxdeploy.lower(model, (x,), target=target, dynamic_shapes={"scores": {0: ("batch", 1, 4)}})
    assert "value_lookups" in deployed.report.fired
    for batch in (1, 3):
        y = torch.rand(batch, 50, 6, generator=torch.Generator().manual_seed(batch))
        for got, want in zip(deployed(y), model(y), strict=True):
            assert torch.equal(got, want)


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
@pytest.mark.parametrize("descending", [False, True])
def test_a_stable_sort_keeps_ties_in_index_order(target: str, descending: bool) -> None:
    """Before: torch.onnx translated aten.sort.default only; ``stable=True`` was refused."""
    require_target(target)
    model = Fn(lambda x: torch.sort(x, dim=1, descending=descending, stable=True))
    x = torch.randint(0, 4, (2, 64), generator=torch.Generator().manual_seed(0)).float()  # many ties
    deployed = fxdeploy.lower(model, (x,), target=target, dynamic_shapes={"x": {0: ("batch", 1, 4)}})
    for batch in (1, 3):
        y = torch.randint(0, 4, (batch, 64), generator=torch.Generator().manual_seed(batch)).float()
        (values, indices), (want_values, want_indices) = deployed(y), model(y)
        assert torch.equal(values, want_values) and torch.equal(indices, want_indices)
