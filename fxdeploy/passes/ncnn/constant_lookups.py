"""Embedding lookups whose ids are constants of the graph, done once: ncnn's Embed reads int32 ids,
which only an integer input of the engine gives it (``lowering/ncnn_ids.py``).

Sliced constant ids. BERT's position ids are its ``arange(512)`` buffer sliced to the length:
``embedding(W, C[:, :L])``. A lookup is elementwise over its ids, so it equals the lookup of the
whole constant, sliced the same way: ``W[C][:, :L]``, a constant that pnnx crops at run time.

One id everywhere. BERT's token-type ids, when the model is given none, are its all-zero buffer gathered by the
position ids and expanded to [B, L]; the lookup reads row 0 for every token. At a dynamic length
pnnx leaves the gather and the expand, which ncnn cannot run, for a value every token shares.

Where the graph proves every id is ``c`` (``vacuous_masks._uniform``: a constant of one value,
views, picks and casts of it), ``embedding(W, ids)`` is ``W[c]`` at every position. Where each
reader adds, subtracts or multiplies it elementwise with a value of the lookup's full shape, the
row alone broadcasts to the same result. Exact. Only for a table that is a constant; ``W[c]``
becomes one.
"""

from __future__ import annotations

import logging

import torch
from torch._guards import detect_fake_mode

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import attribute, call_site, fill_meta
from fxdeploy.passes.ncnn.vacuous_masks import _uniform
from fxdeploy.settings import Settings

logger = logging.getLogger(__name__)
aten = torch.ops.aten
Node = torch.fx.Node
_ELEMENTWISE = {aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor}


def constant_lookups(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.embedding.default:
            continue
        slices = _sliced_constant(gm, node)
        if slices is not None:
            _look_up_whole(gm, node, *slices)
            modified = True
            continue
        reason = check(gm, node)
        if reason is not None:
            logger.debug("constant_lookups: %s stays a lookup: %s", call_site(node), reason)
            continue
        row = _table(gm, node.args[0])[int(_uniform(node.args[1]))].detach().clone()
        name = _free_name(gm, "_uniform_row")
        gm.register_buffer(name, row)
        with gm.graph.inserting_before(node):
            constant = gm.graph.get_attr(name)
        constant.meta["val"] = _fake(node, row)
        node.replace_all_uses_with(constant)
        gm.graph.erase_node(node)
        modified = True
    if modified:
        gm.graph.eliminate_dead_code()
    return PassResult(gm, modified)


def check(gm: torch.fx.GraphModule, node: Node) -> str | None:
    """None when ``node`` is a lookup of one id in a constant table, read only broadcast; else why not."""
    table = _table(gm, node.args[0])
    if table is None:
        return "its table is not a constant of the graph"
    ids = _uniform(node.args[1])
    if isinstance(ids, bool) or not isinstance(ids, int) or not 0 <= ids < table.shape[0]:
        return "the graph does not prove every id the same (one in the table)"
    shape = [str(d) for d in node.meta["val"].shape]
    for user in node.users:
        other = [a for a in user.args[:2] if a is not node]
        if user.target not in _ELEMENTWISE or len(other) != 1 or user.kwargs.get("alpha", 1) != 1:
            return f"{user.format_node()} reads it as more than an elementwise operand"
        value = getattr(other[0], "meta", {}).get("val")
        if not isinstance(value, torch.Tensor) or [str(d) for d in value.shape] != shape:
            return f"{user.format_node()} adds it to a value of another shape (the row would not broadcast to it)"
    return None


def _sliced_constant(gm: torch.fx.GraphModule, node: Node) -> tuple[torch.Tensor, list[Node]] | None:
    """The constant table and the slices (outermost first) that take ``node``'s ids from a constant
    of integer ids, where they do; else None."""
    table, ids, slices = _table(gm, node.args[0]), node.args[1], []
    while isinstance(ids, Node) and ids.target is aten.slice.Tensor and ids.op == "call_function":
        slices.append(ids)
        ids = ids.args[0]
    constant = _table(gm, ids, dims=None)
    if table is None or not slices or constant is None or constant.is_floating_point() or constant.dtype == torch.bool:
        return None
    if constant.numel() and not (0 <= int(constant.min()) and int(constant.max()) < table.shape[0]):
        return None
    return table[constant].detach().clone(), slices


def _look_up_whole(gm: torch.fx.GraphModule, node: Node, looked_up: torch.Tensor, slices: list[Node]) -> None:
    """Replace ``node`` with the constant ``looked_up`` (the lookup of the whole ids), sliced as its ids were."""
    name = _free_name(gm, "_looked_up")
    gm.register_buffer(name, looked_up)
    rank = slices[-1].args[0].meta["val"].dim()  # of the ids: the lookup adds the embedding dim last
    with gm.graph.inserting_before(node):
        value = gm.graph.get_attr(name)
        value.meta["val"] = _fake(node, looked_up)
        for piece in reversed(slices):  # innermost first
            dim = piece.args[1] if len(piece.args) > 1 else piece.kwargs.get("dim", 0)
            args = (value, dim % rank, *piece.args[2:])
            value = gm.graph.call_function(aten.slice.Tensor, args, dict(piece.kwargs))
            fill_meta([value])
    node.replace_all_uses_with(value)
    gm.graph.erase_node(node)


def _fake(node: Node, constant: torch.Tensor) -> torch.Tensor:
    """``constant`` as a fake tensor of the capture's fake mode (a real one would fix the sizes it
    meets in ``fill_meta`` to their example values)."""
    mode = detect_fake_mode([node.meta["val"]])
    return mode.from_tensor(constant, static_shapes=True) if mode is not None else constant


def _table(gm: torch.fx.GraphModule, node: object, dims: int | None = 2) -> torch.Tensor | None:
    """The constant ``node`` is (of ``dims`` dims, any where None); else None."""
    value = attribute(gm, node)
    return value if isinstance(value, torch.Tensor) and (dims is None or value.dim() == dims) else None


def _free_name(gm: torch.fx.GraphModule, base: str) -> str:
    number = 0
    while hasattr(gm, f"{base}_{number}"):
        number += 1
    return f"{base}_{number}"
