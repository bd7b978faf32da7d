from __future__ import annotations

import operator

import torch

from fxdeploy.passes import op_histogram
from fxdeploy.passes.remove_dropout import remove_dropout
from fxdeploy.settings import Settings
from tests.passes.graphs import aten, build


def test_dropout_becomes_identity() -> None:
    def body(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> torch.fx.Node:
        dropped = g.call_function(aten.dropout.default, (xs[0], 0.5, False))
        return g.call_function(aten.mul.Tensor, (dropped, 2.0))

    gm = build(body, 1, [torch.randn(4, 4)])
    result = remove_dropout(gm, Settings())
    result.graph_module.graph.lint()
    result.graph_module.recompile()
    x = torch.randn(4, 4)
    assert result.modified
    assert op_histogram(result.graph_module) == {"aten.mul.Tensor": 1}
    assert torch.equal(result.graph_module(x), x * 2)


def test_native_dropout_mask_users_are_left_alone() -> None:
    def body(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> tuple[torch.fx.Node, torch.fx.Node]:
        pair = g.call_function(aten.native_dropout.default, (xs[0], 0.5, False))
        return g.call_function(operator.getitem, (pair, 0)), g.call_function(operator.getitem, (pair, 1))

    gm = build(body, 1, [torch.randn(4)])
    result = remove_dropout(gm, Settings())
    assert not result.modified
    assert op_histogram(result.graph_module)["aten.native_dropout.default"] == 1


def test_a_dropout_run_in_training_mode_stays_saying_why() -> None:
    """``F.dropout(x, 0.5, training=True)`` in an eval model draws a mask on every call: not the identity."""
    from fxdeploy.passes.remove_dropout import check

    def body(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> torch.fx.Node:
        kept = g.call_function(aten.dropout.default, (xs[0], 0.0, True))  # p = 0: the identity
        return g.call_function(aten.dropout.default, (kept, 0.5, True))

    gm = build(body, 1, [torch.randn(4, 4)])
    result = remove_dropout(gm, Settings())
    assert result.modified and op_histogram(result.graph_module) == {"aten.dropout.default": 1}
    node = next(n for n in result.graph_module.graph.nodes if n.op == "call_function")
    assert check(node) == "train=True with p=0.5: a random mask on every call, not the identity"
