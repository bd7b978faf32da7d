"""boolean_selects: a where between booleans is And/Or/Not, which ONNX Runtime runs."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import fxdeploy
from fxdeploy.passes import op_histogram
from fxdeploy.passes.boolean_selects import boolean_selects, check
from fxdeploy.settings import Settings
from tests.helpers import require_target
from tests.passes.graphs import applied

Op = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
OPS: dict[str, Op] = {
    "tensors": lambda m, v: torch.where(v, m, ~m),
    "other_false": lambda m, v: torch.where(v, m, False),
    "other_true": lambda m, v: torch.where(v, m, True),
    "self_true": lambda m, v: torch.where(v, True, m),
    "self_false": lambda m, v: torch.where(v, False, m),
    "scalars": lambda m, v: torch.where(m, True, False),
    "inverted": lambda m, v: torch.where(m, False, True),
    "all_true": lambda m, v: torch.where(m, True, True),
    "all_false": lambda m, v: torch.where(m, False, False),
    "broadcast_condition": lambda m, v: torch.where(v[:, :1], m, False),
    "broadcast_value": lambda m, v: torch.where(v, True, m[:, :1]),
    "masked_fill": lambda m, v: m.masked_fill(v, True),
    "masked_fill_false": lambda m, v: m.masked_fill(v, False),
    "masked_fill_tensor": lambda m, v: m.masked_fill(v, m[0, 0]),
}


class Masks(torch.nn.Module):
    def __init__(self, op: Op) -> None:
        super().__init__()
        self.op = op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(x > 0, x.abs() < 1)


def _every_pair() -> torch.Tensor:
    """Rows where ``x > 0`` and ``|x| < 1`` take each of their four pairs in every column."""
    return torch.tensor([[-2.0, -0.5, 0.5, 2.0], [2.0, 0.5, -0.5, -2.0], [0.5, 2.0, -2.0, -0.5]])


def _graph(op: Op) -> torch.fx.GraphModule:
    return torch.export.export(Masks(op), (_every_pair(),)).run_decompositions({}).module(check_guards=False)


@pytest.mark.parametrize("op", list(OPS))
def test_the_spelling_is_the_select(op: str) -> None:
    gm = applied(boolean_selects, _graph(OPS[op]))
    histogram = op_histogram(gm)
    assert not any(name.startswith(("aten.where", "aten.masked_fill")) for name in histogram)
    x = _every_pair()
    got = gm(x)
    assert got.dtype == torch.bool
    assert torch.equal(got, Masks(OPS[op])(x))


@pytest.mark.parametrize(("op", "reason"), [
    (lambda m, v: torch.where(v, m.float(), 0.0), "not bool"),
    (lambda m, v: torch.where(v, 1, 0), "not bool"),
    (lambda m, v: (m.int() * 2).masked_fill(v, 0), "not bool"),
])
def test_other_selects_stay(op: Op, reason: str) -> None:
    gm = _graph(op)
    last = [n for n in gm.graph.nodes if n.op == "call_function"][-1]
    assert reason in check(last)
    assert not boolean_selects(gm, Settings()).modified


def test_onnxruntime_lowers_a_gated_mask() -> None:
    """End to end: refused before ("no kernel for Where(16)"), now eager's mask at another batch."""
    require_target("onnxruntime")
    model = Masks(lambda m, v: torch.where(v, m, False) | torch.where(m, True, False).masked_fill(v, True))
    x = _every_pair()
    deployed = fxdeploy.lower(model, (x[:1],), target="onnxruntime", dynamic_shapes={"x": {0: ("batch", 1, 4)}})
    got = deployed(x)
    assert got.dtype == torch.bool
    assert torch.equal(got, model(x))
