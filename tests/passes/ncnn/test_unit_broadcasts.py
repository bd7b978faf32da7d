"""unit_broadcasts: an operand with a leading 1 that broadcasts over the other operand's batch
loses the 1; values do not change."""

from __future__ import annotations

import copy

import torch

from fxdeploy.passes import op_histogram
from fxdeploy.passes.ncnn.unit_broadcasts import unit_broadcasts
from fxdeploy.settings import Settings
from tests.passes.graphs import aten, build

SQUEEZE = "aten.squeeze.dim"


def _run(body, example: list[torch.Tensor]) -> tuple[torch.fx.GraphModule, bool]:
    gm = build(body, len(example), example)
    reference = copy.deepcopy(gm)
    result = unit_broadcasts(gm, Settings())
    result.graph_module.recompile()
    for got, want in zip(result.graph_module(*example), reference(*example), strict=True):
        assert torch.equal(got, want)
    return result.graph_module, result.modified


def test_a_position_embedding_loses_its_leading_one() -> None:
    def body(g, xs):
        position = g.call_function(aten.mul.Tensor, (xs[1], 2.0))  # [1, N, C], made without the images
        return (g.call_function(aten.add.Tensor, (xs[0], position)),
                g.call_function(aten.sub.Tensor, (position, xs[0])))

    gm, modified = _run(body, [torch.randn(3, 5, 4), torch.randn(1, 5, 4)])
    assert modified
    squeezes = [n for n in gm.graph.nodes if str(n.target) == SQUEEZE]
    assert len(squeezes) == 2 and all(tuple(n.meta["val"].shape) == (5, 4) for n in squeezes)
    assert all(n.args[0].target is aten.mul.Tensor for n in squeezes)


def test_other_operands_are_left_alone() -> None:
    def body(g, xs):
        both_one = g.call_function(aten.add.Tensor, (xs[1], xs[1]))  # no batch on either side
        lower_rank = g.call_function(aten.add.Tensor, (xs[0], xs[2]))  # [5, 4]: broadcasting is already there
        scalar = g.call_function(aten.mul.Tensor, (xs[0], 3.0))
        not_pointwise = g.call_function(aten.cat.default, ([xs[0], xs[1]], 0))
        in_place = g.call_function(aten.add_.Tensor, (g.call_function(aten.clone.default, (xs[0],)), xs[1]))
        return both_one, lower_rank, scalar, not_pointwise, in_place

    gm, modified = _run(body, [torch.randn(3, 5, 4), torch.randn(1, 5, 4), torch.randn(5, 4)])
    assert not modified
    assert SQUEEZE not in op_histogram(gm)
