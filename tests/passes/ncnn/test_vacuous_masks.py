"""vacuous_masks: a boolean SDPA mask the graph proves True everywhere is dropped; results stay
equal, and masks that may hold a False are kept."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch

from fxdeploy.passes import op_histogram
from fxdeploy.passes.ncnn.vacuous_masks import vacuous_masks
from fxdeploy.settings import Settings
from tests.passes.graphs import aten, build

SDPA = aten.scaled_dot_product_attention.default
Mask = Callable[[torch.fx.Graph, torch.fx.Node], torch.fx.Node]


def _run(make_mask: Mask, *, as_kwarg: bool = False) -> tuple[torch.fx.GraphModule, bool]:
    """q [2, 4, 5, 8] attends over itself with ``make_mask(graph, q)`` as its mask."""

    def body(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> tuple[torch.fx.Node]:
        mask = make_mask(g, xs[0])
        if as_kwarg:
            return (g.call_function(SDPA, (xs[0], xs[0], xs[0]), {"attn_mask": mask}),)
        return (g.call_function(SDPA, (xs[0], xs[0], xs[0], mask)),)

    q = torch.randn(2, 4, 5, 8)
    gm = build(body, 1, [q])
    reference = copy.deepcopy(gm)
    result = vacuous_masks(gm, Settings())
    result.graph_module.graph.lint()
    result.graph_module.recompile()
    torch.testing.assert_close(result.graph_module(q)[0], reference(q)[0], rtol=0, atol=1e-6, equal_nan=True)
    return result.graph_module, result.modified


def _keys_at_least(g: torch.fx.Graph, bound: int, positions: torch.fx.Node) -> torch.fx.Node:
    """transformers' bidirectional mask: (kv_idx >= bound) as [1, 1, 1, S], expanded to [B, 1, L, S]."""
    kv = g.call_function(aten.unsqueeze.default, (g.call_function(aten.unsqueeze.default, (positions, 0)), 0))
    kv = g.call_function(aten.unsqueeze.default, (kv, 0))
    return g.call_function(aten.expand.default, (g.call_function(aten.ge.Scalar, (kv, bound)), [2, -1, 5, -1]))


def _arange(g: torch.fx.Graph, *args: int) -> torch.fx.Node:
    target = {1: aten.arange.default, 2: aten.arange.start, 3: aten.arange.start_step}[len(args)]
    return g.call_function(target, args)


def test_transformers_bidirectional_mask_is_dropped() -> None:
    def mask(g, q):
        kv_idx = g.call_function(aten.add.Tensor, (_arange(g, 5), 0))  # arange + kv_offset, as transformers
        return _keys_at_least(g, 0, kv_idx)

    for as_kwarg in (False, True):
        gm, modified = _run(mask, as_kwarg=as_kwarg)
        assert modified
        assert op_histogram(gm) == {"aten.scaled_dot_product_attention.default": 1}  # the mask's nodes are gone
        sdpa = next(n for n in gm.graph.nodes if n.target is SDPA)
        assert (sdpa.args[3] if len(sdpa.args) > 3 else sdpa.kwargs["attn_mask"]) is None


def test_ands_and_constant_masks_of_true_are_dropped() -> None:
    def mask(g, q):
        counted = _keys_at_least(g, -1, _arange(g, 2, 17, 3))
        full = g.call_function(aten.full.default, ([2, 1, 5, 5], True), {"dtype": torch.bool})
        return g.call_function(aten.logical_and.default, (counted, full))

    assert _run(mask)[1]


@pytest.mark.parametrize(
    "mask",
    [
        pytest.param(lambda g, q: _keys_at_least(g, 1, _arange(g, 5)), id="ge-1-is-false-at-0"),
        pytest.param(lambda g, q: _keys_at_least(g, 0, _arange(g, -2, 3)), id="negative-start"),
        pytest.param(lambda g, q: _keys_at_least(g, 0, _arange(g, 2, -3, -1)), id="counting-down"),
        pytest.param(
            lambda g, q: _keys_at_least(g, 0, g.call_function(aten.add.Tensor, (_arange(g, 5), 1), {"alpha": -3})),
            id="add-with-negative-alpha",
        ),
        pytest.param(
            lambda g, q: _keys_at_least(g, 0, g.call_function(aten.sub.Tensor, (_arange(g, 5), 2))), id="offset-down"
        ),
        pytest.param(
            lambda g, q: g.call_function(aten.gt.Scalar, (g.call_function(aten.sum.dim_IntList, (q, [3], True)), 0)),
            id="data-dependent",
        ),
        pytest.param(
            lambda g, q: g.call_function(aten.full.default, ([2, 1, 5, 5], False), {"dtype": torch.bool}),
            id="full-of-false",
        ),
    ],
)
def test_masks_that_may_hold_a_false_are_kept(mask: Mask) -> None:
    gm, modified = _run(mask)
    assert not modified
    assert len(op_histogram(gm)) > 1


def test_a_pixel_mask_of_ones_made_into_an_attention_mask_is_dropped() -> None:
    """DETR's shape of it: ones of the image size, resized (nearest) to the feature map, cast to
    bool, flattened, indexed per key, and-ed with a mask of ones, expanded."""

    def mask(g, q):
        pixels = g.call_function(aten.ones.default, ([2, 10, 10],), {"dtype": torch.float32})
        resized = g.call_function(
            aten.upsample_nearest2d.vec, (g.call_function(aten.unsqueeze.default, (pixels, 0)), [1, 5], None)
        )
        keys = g.call_function(aten.to.dtype, (g.call_function(aten.select.int, (resized, 0, 0)), torch.bool))
        keys = g.call_function(aten.flatten.using_ints, (keys, 1))  # [2, 5]
        picked = g.call_function(aten.index.Tensor, (keys, [None, _arange(g, 5)]))
        ones = g.call_function(aten.new_ones.default, (picked, [2, 5]), {"dtype": torch.bool})
        both = g.call_function(aten.__and__.Tensor, (picked, ones))
        return g.call_function(aten.expand.default, (
            g.call_function(aten.unsqueeze.default, (g.call_function(aten.unsqueeze.default, (both, 1)), 1)),
            [2, 1, 5, 5],
        ))

    gm, modified = _run(mask)
    assert modified
    assert op_histogram(gm) == {"aten.scaled_dot_product_attention.default": 1}
