"""scatter_reductions: a scatter_reduce mean, a float amax/amin without self, and scatter(reduce=...) (which had no
ONNX translation), in torch's values."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import fxdeploy
from fxdeploy.passes import op_histogram
from fxdeploy.passes.scatter_reductions import check, scatter_reductions
from fxdeploy.settings import Settings
from tests.helpers import require_target
from tests.passes.graphs import applied

pytestmark = pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")  # the spelling tested
Op = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
INF = float("inf")
OPS: dict[str, Op] = {
    "mean": lambda s, i: torch.ones(s.shape[0], 4).scatter_reduce(1, i, s, "mean"),
    "mean_without_self": lambda s, i: torch.full((s.shape[0], 4), 7.0).scatter_reduce(
        1, i, s, "mean", include_self=False),
    "integer_mean": lambda s, i: torch.ones(s.shape[0], 4, dtype=torch.long).scatter_reduce(
        1, i, (s * 10).long(), "mean"),
    "integer_mean_without_self": lambda s, i: torch.zeros(s.shape[0], 4, dtype=torch.long).scatter_reduce(
        1, i, (s * 10).long(), "mean", include_self=False),
    "amax_of_masked": lambda s, i: torch.zeros(s.shape[0], 4).scatter_reduce(
        1, i, s.masked_fill(s < 0, -INF), "amax", include_self=False),
    "amin_of_masked": lambda s, i: torch.zeros(s.shape[0], 4).scatter_reduce(
        1, i, s.masked_fill(s > 0, INF), "amin", include_self=False),
    "scatter_add": lambda s, i: torch.ones(s.shape[0], 4).scatter(1, i, s, reduce="add"),
    "scatter_multiply": lambda s, i: torch.full((s.shape[0], 4), 2.0).scatter(1, i, s, reduce="multiply"),
    "scatter_value_add": lambda s, i: torch.ones(s.shape[0], 4).scatter(1, i, 1.5, reduce="add"),
    "integer_scatter_multiply": lambda s, i: torch.full((s.shape[0], 4), 3, dtype=torch.long).scatter(
        1, i, (s * 4).long(), reduce="multiply"),
}
OLD_SPELLINGS = [op for op in OPS if "scatter_" in op]


class Reduce(torch.nn.Module):
    def __init__(self, op: Op) -> None:
        super().__init__()
        self.op = op

    def forward(self, s: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        return self.op(s, i)


def _inputs(batch: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """Index 3 is never written (it keeps self); index 0 gets three values, two of them negative
    (all of them in row 1: -inf for amax), index 1 one value."""
    s = torch.tensor([[-0.75, -2.5, 0.5, 1.25, 3.0], [-0.5, -1.5, -3.0, 2.0, 0.25], [1.0, 2.0, 0.5, -1.0, -2.0]])
    i = torch.tensor([[0, 0, 0, 1, 2], [0, 0, 0, 1, 2], [2, 2, 1, 0, 0]])
    return s[:batch], i[:batch]


@pytest.mark.parametrize("op", list(OPS))
def test_the_rewrite_gives_torchs_values(op: str) -> None:
    model, inputs = Reduce(OPS[op]), _inputs()
    gm = applied(scatter_reductions, torch.export.export(model, inputs).module(check_guards=False))
    assert all(check(n) is not None for n in gm.graph.nodes)
    if "mean" in op:
        assert op_histogram(gm)["aten.scatter_add.default"] == 1
    if op in OLD_SPELLINGS:
        assert op_histogram(gm)["aten.scatter_reduce.two"] == 1
    assert torch.equal(gm(*inputs), model(*inputs))


@pytest.mark.parametrize(("op", "reason"), [
    (lambda s, i: torch.zeros(s.shape[0], 4).scatter_reduce(1, i, s, "amax"), "ONNX's own reduction"),
    (lambda s, i: torch.zeros(s.shape[0], 4).scatter_reduce(1, i, s, "sum", include_self=False), "ONNX's own"),
    (lambda s, i: torch.zeros(s.shape[0], 4, dtype=torch.long).scatter_reduce(
        1, i, s.long(), "amax", include_self=False), "an integer amax"),
])
def test_other_reductions_stay(op: Op, reason: str) -> None:
    gm = torch.export.export(Reduce(op), _inputs()).module(check_guards=False)
    reduce = next(n for n in gm.graph.nodes if n.op == "call_function" and "scatter_reduce" in str(n.target))
    assert reason in check(reduce)
    assert not scatter_reductions(gm, Settings()).modified


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_lowered_means_and_masked_maxima_are_eager(target: str) -> None:
    """End to end: the mean was refused (1.28 off: the last value written won) and the masked max
    -3.4e38 where eager's is -inf; now eager's at another batch."""
    require_target(target)
    model = Reduce(lambda s, i: OPS["mean_without_self"](s, i) + OPS["amax_of_masked"](s, i))
    dynamic = {"s": {0: ("batch", 1, 4)}, "i": {0: ("batch", 1, 4)}}
    deployed = fxdeploy.lower(model, _inputs(2), target=target, dynamic_shapes=dynamic)
    got, want = deployed(*_inputs(3)), model(*_inputs(3))
    assert torch.isneginf(want).any()
    assert torch.allclose(got, want, atol=1e-6, equal_nan=False)


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_lowered_scatters_with_reduce_are_eager(target: str) -> None:
    """``scatter(..., reduce="add" | "multiply")`` had no ONNX translation; now eager's at another batch."""
    require_target(target)
    model = Reduce(lambda s, i: torch.cat([OPS[op](s, i).float() for op in OLD_SPELLINGS], 1))
    dynamic = {"s": {0: ("batch", 1, 4)}, "i": {0: ("batch", 1, 4)}}
    deployed = fxdeploy.lower(model, _inputs(2), target=target, dynamic_shapes=dynamic)
    got, want = deployed(*_inputs(3)), model(*_inputs(3))
    assert torch.allclose(got, want, atol=1e-6)
