"""Spell an advanced index that reads every element of its source once, in order, as the views it is.

transformers' ``masking_utils`` builds an encoder's padding mask (BERT's) by indexing the
attention mask with an ``arange`` per dim, each placed in its own dim of the result:

    mask[arange(B)[:, None, None, None], arange(L)[None, None, None, :]]      # [B, 1, 1, L]

pnnx writes ``Tensor.index``, which ncnn has no layer for. Where every dim of ``x`` is indexed by
``arange(n)`` (from 0, step 1, plus 0; ``n`` that dim's size), each moved by unsqueezes alone to a
dim of the result no other index takes, the result holds ``x[i, j, ...]`` at those dims and 1s
elsewhere: ``x`` permuted into the order of those dims, with unit dims inserted between. Exact.
"""

from __future__ import annotations

import logging

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import call_site, fill_meta
from fxdeploy.settings import Settings

logger = logging.getLogger(__name__)
aten = torch.ops.aten
Node = torch.fx.Node


def identity_indexing(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.index.Tensor:
            continue
        places = positions(node)
        if isinstance(places, str):
            logger.debug("identity_indexing: %s stays an index: %s", call_site(node), places)
            continue
        before = set(gm.graph.nodes)
        with gm.graph.inserting_before(node):
            order = sorted(range(len(places)), key=places.__getitem__)
            value = node.args[0]
            if order != list(range(len(order))):
                value = gm.graph.call_function(aten.permute.default, (value, order))
            for dim in sorted(set(range(node.meta["val"].dim())) - set(places)):
                value = gm.graph.call_function(aten.unsqueeze.default, (value, dim))
        fill_meta([n for n in gm.graph.nodes if n not in before])
        if tuple(value.meta["val"].shape) != tuple(node.meta["val"].shape):  # the proof below says it cannot
            raise AssertionError(f"identity_indexing: {value.meta['val'].shape} for {node.meta['val'].shape}")
        node.replace_all_uses_with(value)
        gm.graph.erase_node(node)
        modified = True
    if modified:
        gm.graph.eliminate_dead_code()
    return PassResult(gm, modified)


def positions(node: Node) -> list[int] | str:
    """The result dim each dim of the source lands at, where ``node`` reads every element in order;
    else why not."""
    source, indices = node.args[0], node.args[1]
    value, result = source.meta.get("val"), node.meta.get("val")
    if not isinstance(value, torch.Tensor) or not isinstance(result, torch.Tensor):
        return "its shapes are unknown"
    if len(indices) != value.dim() or any(index is None for index in indices):
        return "it does not index every dim of its source"
    places = []
    for dim, index in enumerate(indices):
        place = _arange_place(index, value.shape[dim])
        if isinstance(place, str):
            return f"index {dim} {place}"
        places.append(place + result.dim() - index.meta["val"].dim())  # broadcast: leading dims added
    if len(set(places)) != len(places):
        return "two indices share a dim of the result"
    return places


def _arange_place(index: object, size: object) -> int | str:
    """Where in ``index``'s shape an ``arange(size)`` lies, where ``index`` is one moved there by
    unsqueezes (and plus 0); else why not."""
    moves = []
    while isinstance(index, Node) and index.op == "call_function":
        if index.target is aten.unsqueeze.default:
            moves.append(index.args[1] % (index.meta["val"].dim()))
        elif index.target is aten.add.Tensor and index.args[1] == 0 and index.kwargs.get("alpha", 1) == 1:
            pass
        else:
            break
        index = index.args[0]
    if not isinstance(index, Node) or not _counts_to(index, size):
        return "is not an arange over that dim (from 0, by 1), unsqueezed"
    place = 0
    for dim in reversed(moves):  # the first unsqueeze applied is the last one walked
        place += dim <= place
    return place


def _counts_to(node: Node, size: object) -> bool:
    """``node`` is ``arange(size)``: 0, 1, ..., size - 1."""
    if node.target is aten.arange.default:
        start, step = 0, 1
    elif node.target in (aten.arange.start, aten.arange.start_step):
        start, step = node.args[0], node.args[2] if len(node.args) > 2 else node.kwargs.get("step", 1)
    else:
        return False
    value = node.meta.get("val")
    return (isinstance(start, int) and start == 0 and isinstance(step, int) and step == 1
            and isinstance(value, torch.Tensor) and value.dim() == 1 and str(value.shape[0]) == str(size))
