"""order_statistics: median and kthvalue values as a sort and a select (their indices unread)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import fxdeploy
from fxdeploy.passes import op_histogram
from fxdeploy.passes.order_statistics import check, order_statistics
from fxdeploy.settings import Settings
from tests.helpers import require_target
from tests.passes.graphs import applied

NAN = float("nan")


class Fn(torch.nn.Module):
    def __init__(self, fn: Callable[[torch.Tensor], object]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> object:
        return self.fn(x)


def _graph(fn: Callable[[torch.Tensor], object], x: torch.Tensor, shapes: object = None) -> torch.fx.GraphModule:
    return torch.export.export(Fn(fn), (x,), dynamic_shapes=shapes).run_decompositions({}).module(check_guards=False)


def values() -> torch.Tensor:
    """Rows with ties, a NaN, infinities, and an even and odd length along each dim."""
    x = torch.randint(0, 5, (4, 7), generator=torch.Generator().manual_seed(0)).float()
    x[1, 2], x[2, 0], x[3, 6] = NAN, float("inf"), -float("inf")
    return x


CASES: dict[str, Callable[[torch.Tensor], object]] = {
    "median_rows": lambda x: x.median(dim=1).values,
    "median_columns_keepdim": lambda x: x.median(dim=0, keepdim=True).values,
    "median_all": lambda x: x.median(),
    "median_int": lambda x: x.nan_to_num(0).clamp(-9, 9).long().median(dim=-1).values,
    "kth_first": lambda x: x.kthvalue(1, dim=1).values,
    "kth_middle_keepdim": lambda x: x.kthvalue(3, dim=0, keepdim=True)[0],
    "kth_last": lambda x: x.kthvalue(7, dim=1).values,
}


@pytest.mark.parametrize("case", list(CASES))
def test_values_are_torchs(case: str) -> None:
    fn, x = CASES[case], values()
    gm = applied(order_statistics, _graph(fn, x))
    assert not any("median" in k or "kthvalue" in k for k in op_histogram(gm)), op_histogram(gm)
    for y in (x, torch.randn(4, 7, generator=torch.Generator().manual_seed(1))):
        torch.testing.assert_close(gm(y), fn(y), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize(
    ("fn", "shapes", "reason"),
    [
        (lambda x: x.median(dim=1).indices, None, "indices are read"),
        (lambda x: x.kthvalue(2, dim=1), None, "indices are read"),
    ],
)
def test_what_it_cannot_give_exactly_stays(fn: Callable[[torch.Tensor], object], shapes: object, reason: str) -> None:
    gm = _graph(fn, values(), shapes)
    node = next(n for n in gm.graph.nodes if "median" in str(n.target) or "kthvalue" in str(n.target))
    assert reason in check(node)
    assert not order_statistics(gm, Settings()).modified


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_a_median_threshold_runs_on_the_onnx_runtimes(target: str) -> None:
    """Before: torch.onnx had no median or kthvalue, and lower() refused the model."""
    require_target(target)
    model = Fn(lambda x: (x > x.median(dim=1, keepdim=True).values, x.kthvalue(2, dim=1).values))
    deployed = fxdeploy.lower(model, (values()[:2],), target=target, dynamic_shapes={"x": {0: ("batch", 1, 4)}})
    assert "order_statistics" in deployed.report.fired
    for y in (values(), values()[:1]):
        for got, want in zip(deployed(y), model(y), strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


DYNAMIC: dict[str, Callable[[torch.Tensor], object]] = {
    "median_rows": lambda x: x.median(dim=1).values,
    "median_all": lambda x: x.median(),
    "kth": lambda x: x.kthvalue(2, dim=1, keepdim=True).values,
}


@pytest.mark.parametrize("case", list(DYNAMIC))
def test_a_dynamic_reduced_dim_selects_at_its_run_time_size(case: str) -> None:
    """The lower median is element (n - 1) // 2 of n, n read at run time: even and odd n alike
    (refused before, "the reduced dim is dynamic")."""
    fn = DYNAMIC[case]
    gm = applied(order_statistics, _graph(fn, values(), ({0: torch.export.Dim("m", min=1, max=9),
                                                         1: torch.export.Dim("n", min=2, max=9)},)))
    assert not any("median" in k or "kthvalue" in k for k in op_histogram(gm)), op_histogram(gm)
    for rows, columns in [(4, 7), (3, 2), (1, 8), (9, 9)]:
        y = values().repeat(3, 2)[:rows, :columns]
        torch.testing.assert_close(gm(y), fn(y), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_a_median_over_a_dynamic_dim_runs_on_the_onnx_runtimes(target: str) -> None:
    require_target(target)
    model = Fn(lambda x: (x - x.median(dim=-1, keepdim=True).values, x.kthvalue(1, dim=-1).values))
    deployed = fxdeploy.lower(model, (values(),), target=target,
                              dynamic_shapes={"x": {0: ("batch", 1, 8), 1: ("n", 2, 16)}})
    for rows, columns in [(4, 7), (2, 6), (8, 13)]:
        y = values().repeat(2, 3)[:rows, :columns]
        for got, want in zip(deployed(y), model(y), strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
