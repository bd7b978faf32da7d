from __future__ import annotations

import torch

from fxdeploy.passes import op_histogram
from fxdeploy.passes.remove_asserts import remove_asserts
from fxdeploy.settings import Settings
from tests.passes.graphs import aten, build


def _graph() -> torch.fx.GraphModule:
    def body(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> torch.fx.Node:
        size = g.call_function(aten.sym_size.int, (xs[0], 0))
        ge = g.call_function(__import__("operator").ge, (size, 1))
        g.call_function(aten._assert_scalar.default, (ge, "batch >= 1"))
        return g.call_function(aten.relu.default, (xs[0],))

    return build(body, 1, [torch.randn(3, 2)])


def test_asserts_and_their_inputs_are_removed() -> None:
    gm = _graph()
    x = torch.randn(3, 2)
    assert op_histogram(gm)["aten._assert_scalar.default"] == 1
    result = remove_asserts(gm, Settings())
    gm = result.graph_module
    gm.graph.lint()
    gm.recompile()
    histogram = op_histogram(gm)
    assert result.modified
    assert histogram == {"aten.relu.default": 1}
    assert torch.equal(gm(x), torch.relu(x))


def test_no_assert_means_not_modified() -> None:
    gm = build(lambda g, xs: g.call_function(aten.relu.default, (xs[0],)), 1, [torch.randn(2)])
    assert not remove_asserts(gm, Settings()).modified
