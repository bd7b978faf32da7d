"""recut: the graph before the cut, cut again with named nodes on the host, each with its reason."""

from __future__ import annotations

import copy
import operator

import pytest
import torch

from fxdeploy.partition.cut import host_postprocess_split, split_parts
from fxdeploy.partition.host_reasons import HOST_REASON
from fxdeploy.partition.recut import origin, recut
from fxdeploy.passes import op_histogram
from fxdeploy.settings import Settings
from tests.partition.test_cut import NMS, _inputs, detector_graph
from tests.passes.graphs import build


def stage_of(gm: torch.fx.GraphModule, name: str) -> tuple[int, torch.fx.Node]:
    parts = split_parts(gm)
    assert parts is not None
    found = [(k, node) for k, part in enumerate(parts.stages) for node in part.module.graph.nodes
             if node.op == "call_function" and origin(node) == name]
    assert len(found) == 1, found
    return found[0]


def test_a_named_engine_node_moves_to_a_host_stage_and_marks_accumulate() -> None:
    gm = detector_graph()
    reference = copy.deepcopy(gm)
    split = host_postprocess_split(gm, Settings()).graph_module
    stage, _ = stage_of(split, "sigmoid_default")
    assert stage == 0  # the engine computes the scores

    once = recut(split, {"sigmoid_default": "pnnx has no ncnn layer for torch.sigmoid (here)"}, Settings())
    stage, node = stage_of(once, "sigmoid_default")
    assert stage % 2 == 1 and node.meta[HOST_REASON] == "pnnx has no ncnn layer for torch.sigmoid (here)"
    twice = recut(once, {"sigmoid_default": "first", "mean_dim": "second"}, Settings())
    assert stage_of(twice, "mean_dim")[0] % 2 == 1 and stage_of(twice, "sigmoid_default")[0] % 2 == 1
    assert NMS in op_histogram(split_parts(twice).stages[-1].module)
    inputs = _inputs()
    for got, want in zip(twice(*inputs), reference(*inputs), strict=True):
        assert torch.equal(got, want)


def test_a_graph_never_cut_is_cut_for_the_first_time() -> None:
    def body(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> tuple[torch.fx.Node]:
        tanh = g.call_function(torch.ops.aten.tanh.default, (xs[0],))
        erfinv = g.call_function(torch.ops.aten.erfinv.default, (tanh,))
        return (g.call_function(torch.ops.aten.mul.Tensor, (erfinv, 2)),)

    gm = build(body, 1, [torch.zeros(2, 3)])
    cut = recut(gm, {"erfinv_default": "pnnx has no ncnn layer for aten::erfinv"}, Settings())
    parts = split_parts(cut)
    assert [p.kind for p in parts.stages] == ["engine", "host"]  # the product only feeds the output: host too
    assert "aten.tanh.default" in op_histogram(parts.head) and "aten.erfinv.default" in op_histogram(parts.tail)
    x = torch.rand(2, 3) - 0.5
    torch.testing.assert_close(cut(x)[0], torch.erfinv(x.tanh()) * 2, rtol=0, atol=0)


def test_a_name_the_graph_does_not_have_is_refused() -> None:
    with pytest.raises(KeyError, match="no node"):
        recut(detector_graph(), {"nothing_here": "why"}, Settings())


def test_an_item_of_a_tuple_is_taken_where_the_tuple_is_made() -> None:
    """A max over a host value, read only by the output: the max stays in an engine stage, and so
    does its item; before, the item went to the host and the engine stage was to hand over
    ``max.dim``'s tuple, which ncnn refused ("got shape tuple")."""
    def body(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> tuple[torch.fx.Node]:
        filled = g.call_function(torch.ops.aten.masked_fill.Scalar, (g.call_function(torch.ops.aten.abs.default,
                                                                                       (xs[0],)), xs[1], 0.0))
        most = g.call_function(torch.ops.aten.max.dim, (filled, -1))
        g.call_function(operator.getitem, (most, 1))
        return (g.call_function(operator.getitem, (most, 0)),)

    x, mask = torch.randn(2, 3, 4), torch.rand(2, 3, 4) > 0.5
    gm = build(body, 2, [x, mask])
    cut = recut(gm, {"masked_fill_scalar": "pnnx has no ncnn layer for Tensor.masked_fill"}, Settings())
    for part in split_parts(cut).stages:
        output = next(n for n in part.module.graph.nodes if n.op == "output")
        assert all(isinstance(v.meta["val"], torch.Tensor) for v in output.args[0]), part.module.graph
    assert stage_of(cut, "getitem_1")[0] == stage_of(cut, "max_dim")[0]
    torch.testing.assert_close(cut(x, mask)[0], x.abs().masked_fill(mask, 0.0).max(-1).values, rtol=0, atol=0)
