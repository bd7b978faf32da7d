"""half_comparison_scalars: a half tensor compared with a number compares with the number in half."""

from __future__ import annotations

import pytest
import torch

from fxdeploy.passes import op_histogram
from fxdeploy.passes.half_comparison_scalars import check, half_comparison_scalars, rounded
from fxdeploy.settings import Settings
from tests.passes.graphs import applied


def _graph(fn: object, *inputs: torch.Tensor) -> torch.fx.GraphModule:
    class Model(torch.nn.Module):
        def forward(self, *args: torch.Tensor) -> torch.Tensor:
            return fn(*args)

    return torch.export.export(Model(), inputs).run_decompositions({}).module(check_guards=False)


def _comparison(gm: torch.fx.GraphModule) -> torch.fx.Node:
    return next(n for n in gm.graph.nodes if n.op == "call_function" and str(n.target).split(".")[-2] == "ge")


def test_the_number_is_rounded_as_torch_rounds_it() -> None:
    """0.1 becomes half(0.1); a double between two halves rounds through float32, as c10's Half does."""
    x = torch.tensor([0.1, 0.09999, 0.2])
    gm = _graph(lambda x: x.half() >= 0.1, x)
    gm = applied(half_comparison_scalars, gm)
    assert _comparison(gm).args[1] == 0.0999755859375 == rounded(0.1, torch.float16)
    assert torch.equal(gm(x), x.half() >= 0.1)
    assert rounded(1 + 2**-11 + 2**-30, torch.float16) == 1.0  # double -> half directly would give 1 + 2**-10
    assert (torch.tensor([1.0]).half() >= 1 + 2**-11 + 2**-30).item()  # eager agrees: it compared with 1.0


def test_a_0d_float_tensor_is_cast_to_half() -> None:
    x = torch.tensor([0.1, 0.3])
    gm = _graph(lambda x, t: x.half() >= t, x, torch.tensor(0.1))
    gm = applied(half_comparison_scalars, gm)
    assert op_histogram(gm)["aten._to_copy.default"] == 2
    assert torch.equal(gm(x, torch.tensor(0.1)), x.half() >= torch.tensor(0.1))


@pytest.mark.parametrize(("fn", "reason"), [
    (lambda x: x.half() >= 0.5, "already a value"),
    (lambda x: x >= 0.1, "not a half"),
    (lambda x: x.half() >= 1, "not a half or bfloat16 tensor against a float"),
    (lambda x: x.half() >= x, "not a 0-d float tensor"),
])
def test_other_comparisons_stay(fn: object, reason: str) -> None:
    gm = _graph(fn, torch.tensor([0.1, 0.3]))
    assert reason in check(_comparison(gm))
    assert not half_comparison_scalars(gm, Settings()).modified
