"""input_attention_masks: an attention mask made from a bool or integer input becomes float
arithmetic with the same results, rows with every key masked included; other masks stay."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from fxdeploy.passes import op_histogram
from fxdeploy.passes.ncnn.input_attention_masks import input_attention_masks
from fxdeploy.settings import Settings
from tests.passes.graphs import applied, aten, build

SDPA = aten.scaled_dot_product_attention.default
Node = torch.fx.Node
Q = torch.randn(3, 2, 5, 8, generator=torch.Generator().manual_seed(0))
MASK = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0], [3, 0, -2, 1, 1]])  # row 1 masks every key


def _view(g: torch.fx.Graph, mask: Node) -> Node:
    """BERT's: bool(mask)[:, None, None, :], and-ed with an all-True [1, 1, L, 1], expanded."""
    keep = g.call_function(aten._to_copy.default, (mask,), {"dtype": torch.bool})
    keep = g.call_function(aten.unsqueeze.default, (g.call_function(aten.unsqueeze.default, (keep, 1)), 2))
    kv = g.call_function(aten.arange.default, (5,))
    rows = g.call_function(aten.ge.Scalar, (g.call_function(aten.view.default, (kv, [1, 1, 5, 1])), 0))
    both = g.call_function(aten.__and__.Tensor, (rows, keep))
    return g.call_function(aten.expand.default, (both, [3, -1, 5, 5]))


def _run(make_mask: Callable[[torch.fx.Graph, Node], Node], mask: torch.Tensor) -> tuple[torch.fx.GraphModule, bool]:
    def body(g: torch.fx.Graph, xs: list[Node]) -> tuple[Node]:
        return (g.call_function(SDPA, (xs[0], xs[0], xs[0], make_mask(g, xs[1]))),)

    gm = build(body, 2, [Q, mask])
    reference = copy.deepcopy(gm)
    result = input_attention_masks(gm, Settings())
    result.graph_module.graph.lint()
    result.graph_module.recompile()
    torch.testing.assert_close(result.graph_module(Q, mask)[0], reference(Q, mask)[0], rtol=1e-6, atol=1e-6)
    return result.graph_module, result.modified


@pytest.mark.parametrize(
    ("make_mask", "mask"),
    [
        (_view, MASK),  # an integer mask, 0 and nonzero values
        (lambda g, m: g.call_function(aten.unsqueeze.default, (m, 1)), (MASK != 0)[:, None, :].expand(3, 5, 5)),
    ],
    ids=["integer-padding", "bool-input"],
)
def test_an_input_mask_becomes_float_arithmetic_with_the_same_results(make_mask, mask) -> None:
    gm, modified = _run(make_mask, mask)
    assert modified
    ops = op_histogram(gm)
    assert "aten.where.Scalar" not in ops and "aten.__and__.Tensor" not in ops and "aten.expand.default" not in ops
    sdpa = next(n for n in gm.graph.nodes if n.target is SDPA)
    assert sdpa.args[3].meta["val"].dtype == torch.float32


@pytest.mark.parametrize(
    ("make_mask", "mask"),
    [
        (lambda g, m: g.call_function(aten.unsqueeze.default, (m, 1)), torch.zeros(3, 5, 5)),  # already additive
        (lambda g, m: g.call_function(aten.gt.Scalar, (g.call_function(aten.unsqueeze.default, (m, 1)), 0.5)),
         torch.rand(3, 5, 5)),  # a comparison of floats: comparisons_as_arithmetic's
        (lambda g, m: g.call_function(aten.view.default, (g.call_function(aten.__and__.Tensor, (
            g.call_function(aten.ones.default, ([1, 5],), {"dtype": torch.bool}), m)), [3, 1, 1, 5])),
         MASK != 0),  # the all-True operand dropped would change what the view reads
    ],
    ids=["float-mask", "float-comparison", "and-read-by-a-view"],
)
def test_other_masks_stay(make_mask, mask) -> None:
    _, modified = _run(make_mask, mask)
    assert not modified


def test_a_where_mask_of_a_constant_causal_part_and_an_input_becomes_float_arithmetic() -> None:
    """CLIP's text encoder: ``where(causal & padding, 0, -inf)``, its causal part a folded constant.
    The float twin gives the same values, the row whose every kept key is padding included."""
    root = torch.nn.Module()
    root.register_buffer("causal", torch.ones(5, 5, dtype=torch.bool).tril()[None, None])
    graph = torch.fx.Graph()
    q, mask = graph.placeholder("q"), graph.placeholder("mask")
    keep = graph.call_function(aten._to_copy.default, (mask,), {"dtype": torch.bool})
    keep = graph.call_function(aten.unsqueeze.default, (graph.call_function(aten.unsqueeze.default, (keep, 1)), 2))
    both = graph.call_function(aten.__and__.Tensor, (graph.get_attr("causal"), keep))
    additive = graph.call_function(aten.where.Scalar, (both, 0.0, float("-inf")))
    graph.output((graph.call_function(SDPA, (q, q, q, additive)),))
    gm = torch.fx.GraphModule(root, graph)
    padded = torch.tensor([[1, 1, 1, 0, 0], [0, 1, 1, 1, 1], [1, 0, 1, 1, 0]])  # row 1: query 0 keeps no key
    FakeTensorProp(gm, FakeTensorMode(allow_non_fake_inputs=True)).propagate(Q, padded)
    reference = copy.deepcopy(gm)
    gm = applied(input_attention_masks, gm)
    assert "aten.where.Scalar" not in op_histogram(gm)
    want = reference(Q, padded)[0]
    assert torch.equal(want[1, :, 0], torch.zeros(2, 8))  # PyTorch's fully masked row: 0
    torch.testing.assert_close(gm(Q, padded)[0], want, rtol=1e-6, atol=1e-6)


def test_a_mask_with_no_input_in_it_is_left_to_float_attention_mask() -> None:
    root = torch.nn.Module()
    root.register_buffer("causal", torch.ones(5, 5, dtype=torch.bool).tril()[None, None])
    graph = torch.fx.Graph()
    q = graph.placeholder("q")
    graph.output((graph.call_function(SDPA, (q, q, q, graph.get_attr("causal"))),))
    gm = torch.fx.GraphModule(root, graph)
    FakeTensorProp(gm, FakeTensorMode(allow_non_fake_inputs=True)).propagate(Q)
    assert not input_attention_masks(gm, Settings()).modified
