"""functional_fills: a functional zero or fill becomes the factory op it stands for, which
torch.jit.trace records (it asserts on the functional ones), with the same values."""

from __future__ import annotations

import warnings

import torch

from fxdeploy.capture.functional import functionalize
from fxdeploy.passes import op_histogram
from fxdeploy.passes.ncnn.functional_fills import check, functional_fills
from fxdeploy.settings import Settings

FILLS = {"aten.zero.default", "aten.fill.Scalar", "aten.fill.Tensor"}


class Writes(torch.nn.Module):
    """Writes of one value through views: each is functionalized into a zero or a fill."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("negative_zero", torch.tensor(-0.0, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y[:, 1:3].zero_()
        y[:, 4].fill_(float("inf"))
        y[:, 5:].fill_(self.negative_zero)  # a float64 -0.0 cast to float32: 1 / y reads its sign
        return 1 / y


def _graph(model: torch.nn.Module, x: torch.Tensor) -> torch.fx.GraphModule:
    shapes = ({0: torch.export.Dim("batch")},)
    return functionalize(torch.export.export(model, (x,), dynamic_shapes=shapes)).module()


def test_fills_become_factory_ops_with_the_same_values() -> None:
    model, x = Writes(), torch.randn(2, 7)
    gm = _graph(model, x)
    assert FILLS <= set(op_histogram(gm))
    result = functional_fills(gm, Settings())
    assert result.modified
    result.graph_module.graph.lint()
    result.graph_module.recompile()
    histogram = op_histogram(result.graph_module)
    assert not FILLS & set(histogram)
    assert {"aten.zeros_like.default", "aten.full_like.default", "aten.ones_like.default"} <= set(histogram)
    for fresh in (torch.randn(3, 7), torch.full((1, 7), float("nan"))):
        # -inf where eager has it (the -0.0's sign kept), NaN where the input's NaN stays
        torch.testing.assert_close(result.graph_module(fresh), model(fresh), rtol=0, atol=0, equal_nan=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(result.graph_module, (x,), check_trace=False)  # torch asserts on the fills
    assert torch.equal(traced(x), model(x))


def test_other_ops_stay() -> None:
    gm = _graph(Writes(), torch.randn(2, 7))
    others = [n for n in gm.graph.nodes if n.op == "call_function" and str(n.target) not in FILLS]
    assert all(check(n) == "not aten.zero or aten.fill" for n in others)
