"""boolean_scalars: a bool result computed with a Python bool operand stays bool on TorchScript."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import fxdeploy
from fxdeploy.lowering.torchscript import script_graph
from fxdeploy.passes import op_histogram
from fxdeploy.passes.boolean_scalars import boolean_scalars, check
from fxdeploy.settings import Settings
from tests.passes.graphs import applied

Op = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
OPS: dict[str, Op] = {
    "where_scalars": lambda m, v: torch.where(m, True, False),
    "where_other": lambda m, v: torch.where(v, m, False),
    "where_self": lambda m, v: torch.where(v, True, m),
    "and": lambda m, v: m & True,
    "or": lambda m, v: m | False,
    "xor": lambda m, v: m ^ True,
    "add": lambda m, v: m + True,  # torch's or of bools; TorchScript's int add gave 2
}
M = torch.tensor([[False, True, True, False], [True, False, True, False]])
V = torch.tensor([[True, True, False, False], [False, True, True, True]])


class Masks(torch.nn.Module):
    def __init__(self, op: Op) -> None:
        super().__init__()
        self.op = op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(x > 0, x.abs() < 1)


def _graph(op: Op) -> torch.fx.GraphModule:
    x = torch.tensor([[-1.0, 0.5, 2.0, -0.5]])
    return torch.export.export(Masks(op), (x,)).run_decompositions({}).module(check_guards=False)


def _inputs() -> torch.Tensor:
    """x with ``x > 0`` equal to M and ``|x| < 1`` equal to V."""
    return torch.where(M, torch.where(V, 0.5, 2.0), torch.where(V, -0.5, -2.0))


@pytest.mark.parametrize("op", list(OPS))
def test_the_scripted_result_is_eager_bool(op: str) -> None:
    gm = applied(boolean_scalars, _graph(OPS[op]))
    assert op_histogram(gm)["aten._to_copy.default"] == 1
    (got,), want = script_graph(gm, target="torchscript")(_inputs()), Masks(OPS[op])(_inputs())
    assert got.dtype == want.dtype == torch.bool
    assert torch.equal(got, want)


@pytest.mark.parametrize(("op", "reason"), [
    (lambda m, v: m == True, "a comparison"),  # noqa: E712
    (lambda m, v: torch.where(v, m.float(), 0.0), "not a bool tensor"),
    (lambda m, v: m & v, "no Python bool"),
    (lambda m, v: m.any(1, keepdim=True) & v, "no Python bool"),
])
def test_other_ops_stay(op: Op, reason: str) -> None:
    gm = _graph(op)
    last = [n for n in gm.graph.nodes if n.op == "call_function"][-1]
    assert reason in check(last)
    assert not boolean_scalars(gm, Settings()).modified


def test_lowered_torchscript_keeps_the_mask_a_mask() -> None:
    """End to end: the artifact's mask is bool, so ``~mask`` and ``x[mask]`` are eager's."""
    model = Masks(lambda m, v: torch.where(v, m, False))
    x = _inputs()
    deployed = fxdeploy.lower(model, (x[:1],), target="torchscript", dynamic_shapes={"x": {0: ("batch", 1, 4)}})
    got, want = deployed(x), model(x)
    assert got.dtype == torch.bool
    assert torch.equal(~got, ~want)
    assert torch.equal(x[got], x[want])
