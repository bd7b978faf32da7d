"""max_indices: torch.max(x, dim) with its indices read becomes amax + argmax (ncnn has no axis argmax)."""

from __future__ import annotations

import operator

import torch

from fxdeploy.passes import op_histogram
from fxdeploy.passes.ncnn.max_indices import check, max_indices
from fxdeploy.settings import Settings
from tests.passes.graphs import aten, build


def _best_class(graph: torch.fx.Graph, inputs: list[torch.fx.Node]) -> object:
    both = graph.call_function(aten.max.dim, (inputs[0], -1, False))
    values = graph.call_function(operator.getitem, (both, 0))
    labels = graph.call_function(operator.getitem, (both, 1))
    return (graph.call_function(aten.mul.Tensor, (values, 2.0)), labels)


def _values_only(graph: torch.fx.Graph, inputs: list[torch.fx.Node]) -> object:
    both = graph.call_function(aten.max.dim, (inputs[0], 1, True))
    return (graph.call_function(operator.getitem, (both, 0)),)


def test_max_with_indices_becomes_amax_and_argmax() -> None:
    scores = torch.rand(50, 7)
    scores[3, 2] = scores[3, 5] = 2.0  # a tie: both return the first index of the maximum
    gm = build(_best_class, 1, [scores])
    want = gm(scores)
    result = max_indices(gm, Settings())
    gm = result.graph_module
    gm.graph.lint()
    gm.recompile()
    assert result.modified
    assert op_histogram(gm) == {"aten.amax.default": 1, "aten.argmax.default": 1, "aten.mul.Tensor": 1}
    got = gm(scores)
    torch.testing.assert_close(got, want)
    assert int(got[1][3]) == 2


def test_max_whose_indices_are_unused_is_kept() -> None:
    gm = build(_values_only, 1, [torch.rand(4, 6)])
    node = next(n for n in gm.graph.nodes if n.target is aten.max.dim)
    assert check(node) == "its indices are not read"
    assert not max_indices(gm, Settings()).modified
