"""fold_constants: what reads no graph input (an anchor grid made in forward) becomes a buffer."""

from __future__ import annotations

import operator

import torch

from fxdeploy.passes import op_histogram
from fxdeploy.passes.graph_utils import written_in_place
from fxdeploy.passes.ncnn.fold_constants import MAX_ELEMENTS, check, fold_constants
from fxdeploy.settings import Settings
from tests.passes.graphs import aten, build


def _anchors(graph: torch.fx.Graph, inputs: list[torch.fx.Node]) -> object:
    """Ultralytics' make_anchors at a 4 x 6 map: arange, type_as the features, meshgrid, stack."""
    call = graph.call_function
    features = inputs[0]
    xs = call(aten.add.Tensor, (call(aten.type_as.default, (call(aten.arange.default, (6,)), features)), 0.5))
    ys = call(aten.add.Tensor, (call(aten.type_as.default, (call(aten.arange.default, (4,)), features)), 0.5))
    grid = call(aten.meshgrid.indexing, ([ys, xs],), {"indexing": "ij"})
    points = call(aten.stack.default, ([call(operator.getitem, (grid, 1)), call(operator.getitem, (grid, 0))], -1))
    points = call(aten.view.default, (points, [24, 2]))
    flat = call(aten.view.default, (features, [24, 2]))
    return (call(aten.add.Tensor, (flat, points)),)


def _copied_into(graph: torch.fx.Graph, inputs: list[torch.fx.Node]) -> object:
    """A zero buffer that the input is copied into: the written value is no constant."""
    call = graph.call_function
    buffer = call(aten.new_full.default, (inputs[0], [4, 8], 0.0))
    call(aten.copy_.default, (call(aten.slice.Tensor, (buffer, 1, 0, 6)), inputs[0]))
    return (call(aten.mul.Tensor, (buffer, 2.0)),)


def _random(graph: torch.fx.Graph, inputs: list[torch.fx.Node]) -> object:
    call = graph.call_function
    return (call(aten.add.Tensor, (inputs[0], call(aten.rand.default, ([3],), {"dtype": torch.float32}))),)


def test_an_anchor_grid_becomes_one_buffer() -> None:
    x = torch.randn(4, 6, 2)
    gm = build(_anchors, 1, [x])
    want = gm(x)
    result = fold_constants(gm, Settings())
    gm = result.graph_module
    gm.graph.lint()
    gm.recompile()
    assert result.modified
    assert op_histogram(gm) == {"aten.view.default": 1, "aten.add.Tensor": 1}
    constants = [n for n in gm.graph.nodes if n.op == "get_attr"]
    assert len(constants) == 1 and tuple(getattr(gm, constants[0].target).shape) == (24, 2)
    for seed in range(3):  # the input still flows: only the grid is constant
        other = torch.randn(4, 6, 2, generator=torch.Generator().manual_seed(seed))
        gm_out, eager = gm(other)[0], build(_anchors, 1, [other])(other)[0]
        torch.testing.assert_close(gm_out, eager)
    torch.testing.assert_close(gm(x)[0], want[0])


def test_a_buffer_written_in_place_is_not_folded() -> None:
    x = torch.randn(4, 6)
    gm = build(_copied_into, 1, [x])
    before = op_histogram(gm)
    result = fold_constants(gm, Settings())
    assert not result.modified and op_histogram(result.graph_module) == before
    buffer = next(n for n in gm.graph.nodes if str(n.target) == "aten.new_full.default")
    assert check(gm, buffer, {}, written_in_place(gm.graph)) == "written in place"


def test_random_and_large_values_say_why_they_stay() -> None:
    gm = build(_random, 1, [torch.randn(3)])
    rand = next(n for n in gm.graph.nodes if str(n.target) == "aten.rand.default")
    assert check(gm, rand, {}) == "rand is random or uninitialized"
    assert not fold_constants(gm, Settings()).modified

    def large(graph: torch.fx.Graph, inputs: list[torch.fx.Node]) -> object:
        zeros = graph.call_function(aten.zeros.default, ([MAX_ELEMENTS + 1],))
        return (graph.call_function(aten.add.Tensor, (inputs[0], zeros)),)

    gm = build(large, 1, [torch.randn(MAX_ELEMENTS + 1)])
    zeros = next(n for n in gm.graph.nodes if str(n.target) == "aten.zeros.default")
    assert "elements" in check(gm, zeros, {})
    assert not fold_constants(gm, Settings()).modified


def test_an_input_read_only_for_its_dtype_still_folds() -> None:
    gm = build(_anchors, 1, [torch.randn(4, 6, 2)])
    type_as = next(n for n in gm.graph.nodes if str(n.target) == "aten.type_as.default")
    arange = type_as.args[0]
    assert check(gm, type_as, {arange: torch.arange(6)}) is None
    add = next(n for n in gm.graph.nodes if str(n.target) == "aten.add.Tensor" and n.args[0].op == "call_function"
               and str(n.args[0].target) == "aten.view.default")
    assert check(gm, add, {}) == "reads a graph input or a parameter"


def test_torchvision_rpn_levels_fold_whole() -> None:
    """rpn.py: ``levels.reshape(1, -1).expand_as(objectness)``, sized by ``objectness.size(1)``:
    the expand reads the input for its shape only, and a size at a static shape is a number."""

    def body(graph: torch.fx.Graph, inputs: list[torch.fx.Node]) -> object:
        call = graph.call_function
        count = call(aten.sym_size.int, (inputs[0], 1))
        levels = call(aten.cat.default, ([call(aten.full.default, ([6], 0)), call(aten.full.default, ([2], 1))],))
        levels = call(aten.expand_as.default, (call(aten.view.default, (levels, [1, count])), inputs[0]))
        return (call(aten.mul.Tensor, (inputs[0], levels)),)

    x = torch.randn(1, 8)
    gm = build(body, 1, [x])
    want = gm(x)
    result = fold_constants(gm, Settings())
    gm = result.graph_module
    gm.graph.lint()
    gm.recompile()
    assert result.modified and op_histogram(gm) == {"aten.mul.Tensor": 1}
    torch.testing.assert_close(gm(x)[0], want[0])


class _OnesOfDynamicInput(torch.nn.Module):
    """``x.new_ones(3)`` reads only x's dtype, but x's size is symbolic: nothing to evaluate it on."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(0) + x.new_ones(3)


def test_metadata_of_a_symbolic_size_input_does_not_fold() -> None:
    x = torch.randn(4, 3)
    program = torch.export.export(_OnesOfDynamicInput(), (x,), dynamic_shapes=({0: torch.export.Dim("n")},))
    gm = program.module()
    ones = next(n for n in gm.graph.nodes if n.target is aten.new_ones.default)
    assert check(gm, ones, {}) == "reads the metadata of a tensor of symbolic size"
    result = fold_constants(gm, Settings())  # raised "SymIntArrayRef expected to contain only concrete integers"
    assert not result.modified
    torch.testing.assert_close(result.graph_module(torch.ones(5, 3)), torch.full((3,), 6.0))
