"""identity_indexing: an advanced index by aranges that reads every element once, in order, becomes
the permute and unsqueezes it is; any index that picks, repeats or reorders elements stays."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch

from fxdeploy.passes import op_histogram
from fxdeploy.passes.ncnn.identity_indexing import identity_indexing
from fxdeploy.settings import Settings
from tests.passes.graphs import aten, build

Node = torch.fx.Node


def _placed(g: torch.fx.Graph, index: Node, unsqueezes: tuple[int, ...]) -> Node:
    for dim in unsqueezes:
        index = g.call_function(aten.unsqueeze.default, (index, dim))
    return index


def _run(indices: Callable[[torch.fx.Graph], list[Node]], x: torch.Tensor) -> tuple[torch.fx.GraphModule, bool]:
    def body(g: torch.fx.Graph, xs: list[Node]) -> tuple[Node]:
        return (g.call_function(aten.index.Tensor, (xs[0], indices(g))),)

    gm = build(body, 1, [x])
    reference = copy.deepcopy(gm)
    result = identity_indexing(gm, Settings())
    result.graph_module.graph.lint()
    result.graph_module.recompile()
    got, want = result.graph_module(x)[0], reference(x)[0]
    assert got.shape == want.shape
    assert torch.equal(got, want)
    return result.graph_module, result.modified


def _ar(g: torch.fx.Graph, *args: int) -> Node:
    return g.call_function({1: aten.arange.default, 2: aten.arange.start, 3: aten.arange.start_step}[len(args)], args)


X = torch.arange(2 * 6, dtype=torch.int64).view(2, 6)


@pytest.mark.parametrize(
    ("indices", "x"),
    [
        # transformers' padding mask: mask[arange(B)[:, None, None, None], (arange(L) + 0)[None, None, None, :]]
        (lambda g: [_placed(g, _ar(g, 2), (1, 2, 3)),
                    _placed(g, g.call_function(aten.add.Tensor, (_ar(g, 6), 0)), (0, 1, 3))], X),
        # the dims moved past each other: x[arange(2)[None, :], arange(6)[:, None]] is x transposed
        (lambda g: [_placed(g, _ar(g, 2), (0,)), _placed(g, _ar(g, 0, 6), (-1,))], X),
        # a lower-rank index broadcast from the left, a float source
        (lambda g: [_placed(g, _ar(g, 0, 2, 1), (1, 2)), _placed(g, _ar(g, 6), (1,))], X.float()),
    ],
    ids=["padding-mask", "transposed", "broadcast-rank"],
)
def test_an_index_reading_every_element_in_order_becomes_views(indices, x) -> None:
    gm, modified = _run(indices, x)
    assert modified
    assert "aten.index.Tensor" not in op_histogram(gm)


@pytest.mark.parametrize(
    ("indices", "x"),
    [
        (lambda g: [_placed(g, _ar(g, 1, 2), (1,)), _placed(g, _ar(g, 6), (0,))], X),  # from 1: picks a row
        (lambda g: [_placed(g, _ar(g, 0, 2, 2), (1,)), _placed(g, _ar(g, 6), (0,))], X),  # by 2
        (lambda g: [_placed(g, _ar(g, 2), (1,)), _placed(g, _ar(g, 3), (0,))], X),  # 3 of the 6 columns
        (lambda g: [_placed(g, _ar(g, 2), (1,))], X),  # the rows only
        (lambda g: [_ar(g, 2), _ar(g, 2)], X[:, :2]),  # one dim for both: the diagonal
        (lambda g: [_placed(g, g.call_function(aten.add.Tensor, (_ar(g, 2), 0)), (1,)),
                    _placed(g, g.call_function(aten.flip.default, (_ar(g, 6), [0])), (0,))], X),  # reversed
    ],
    ids=["from-1", "by-2", "shorter", "rows-only", "diagonal", "reversed"],
)
def test_an_index_that_picks_or_reorders_stays(indices, x) -> None:
    gm, modified = _run(indices, x)
    assert not modified
    assert "aten.index.Tensor" in op_histogram(gm)
