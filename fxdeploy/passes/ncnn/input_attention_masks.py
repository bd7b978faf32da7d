"""Give scaled_dot_product_attention a mask made from a model input as float arithmetic ncnn runs.

BERT's padding mask reaches attention as ``attention_mask.bool()`` viewed to [B, 1, 1, L] (and
``and``-ed with an all-True part, then expanded). ncnn has no bool blobs and no ``where``, so the
``where(m, 0, -inf)`` that ``float_attention_mask`` makes of a mask known only at run time stays
unconverted. This pass builds the mask's float twin ``m01`` (1 where a key is attended) from the
same views instead: ``bool(x)`` of an integer ``x`` is ``clamp(|x|, 0, 1)`` exactly, a bool input
is cast, ``and`` is a product, and an all-True operand of an ``and`` is dropped where the result
is only broadcast further (expanded, or given to attention). Then

    sdpa(q, k, v, m) == sdpa(q, k, v, (m01 - 1) * FLT_MAX) * amax(m01, -1, keepdim=True)

Exact: where ``m01`` is 1 the additive mask is 0; where it is 0, -FLT_MAX, and the softmax gives
the key ``exp(-FLT_MAX - max) = 0``, as ``-inf`` does, in every row that keeps a key. A row that
keeps none is 0 in PyTorch's attention, and the ``amax`` factor makes it 0 here (the uniform
softmax's mean of finite ``v`` times 0); with ``-inf`` ncnn would give NaN there.

CLIP's text encoder hands attention ``where(causal & padding, 0, -inf)``: a float mask that is the bool
one spelt out (PyTorch's attention gives the same values for both, a fully masked row's 0 included),
so the bool is taken, and its causal part, a constant after ``fold_constants``, is given a float32
constant twin. A mask with no model input in it is left to ``float_attention_mask``.
"""

from __future__ import annotations

import logging

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import attribute, call_site, fill_meta
from fxdeploy.passes.ncnn.constant_lookups import _fake
from fxdeploy.passes.ncnn.fold_constants import _free_name
from fxdeploy.passes.ncnn.vacuous_masks import _ANDS, _CASTS, _uniform
from fxdeploy.settings import Settings

logger = logging.getLogger(__name__)
aten = torch.ops.aten
Node = torch.fx.Node
_SDPA = aten.scaled_dot_product_attention.default
_MASK_ARG = 3
_SHAPE_VIEWS = {
    aten.expand.default, aten.unsqueeze.default, aten.view.default, aten.reshape.default, aten._unsafe_view.default,
    aten.permute.default, aten.transpose.int, aten.clone.default, aten.alias.default, aten.slice.Tensor,
    aten.select.int, aten.squeeze.dim, aten.squeeze.default, aten.contiguous.default,
}
"""Ops that move or pick a mask's elements the same way whatever their dtype."""
FLT_MAX = torch.finfo(torch.float32).max


def input_attention_masks(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not _SDPA:
            continue
        reason = check(node)
        if reason is not None:
            logger.debug("input_attention_masks: %s keeps its mask: %s", call_site(node), reason)
            continue
        mask = _bool_mask(node)
        before = set(gm.graph.nodes)
        graph = gm.graph
        with graph.inserting_before(node):
            ones = _twin(gm, mask, {})
            shifted = graph.call_function(aten.sub.Tensor, (ones, 1.0))  # 0 where attended, -1 elsewhere
            scaled = graph.call_function(aten.mul.Tensor, (shifted, FLT_MAX))
            column = graph.call_function(aten.slice.Tensor, (node.args[0], -1, 0, 1))  # [..., L, 1] of the query
            rows = graph.call_function(aten.clamp.default, (column, 0.0, 0.0))  # its zeros, NaN where q has one
            additive = graph.call_function(aten.add.Tensor, (scaled, rows))  # a row for every query
            keep = graph.call_function(aten.amax.default, (ones, [-1], True))
        if len(node.args) > _MASK_ARG:
            node.update_arg(_MASK_ARG, additive)
        else:
            node.update_kwarg("attn_mask", additive)
        with graph.inserting_after(node):
            kept = graph.call_function(aten.mul.Tensor, (node, keep))
        node.replace_all_uses_with(kept, delete_user_cb=lambda user, kept=kept: user is not kept)
        fill_meta([n for n in graph.nodes if n not in before and n.op != "get_attr"])
        modified = True
    if modified:
        gm.graph.eliminate_dead_code()
    return PassResult(gm, modified)


def check(node: Node) -> str | None:
    """None when ``node`` is an attention whose bool mask has a float twin from an input; else why not."""
    mask, query = _bool_mask(node), node.args[0].meta.get("val")
    value = mask.meta.get("val") if isinstance(mask, Node) else None
    if not isinstance(value, torch.Tensor) or value.dtype != torch.bool:
        return "its mask is neither a bool tensor nor where(bool, 0, -inf)"
    if not isinstance(query, torch.Tensor) or query.dtype != torch.float32:
        return "its query is not float32"
    if not _reads_input(mask):
        return "its mask reads no model input (float_attention_mask takes a constant one)"
    return _twin_reason(mask)


def _mask_of(node: Node) -> object:
    return node.args[_MASK_ARG] if len(node.args) > _MASK_ARG else node.kwargs.get("attn_mask")


def _bool_mask(node: Node) -> object:
    """The attention's mask as a bool: itself, or ``b`` of a float mask ``where(b, 0, -inf)``."""
    mask = _mask_of(node)
    if isinstance(mask, Node) and mask.target is aten.where.Scalar and mask.args[1:] == (0.0, float("-inf")):
        return mask.args[0]
    return mask


def _reads_input(node: Node) -> bool:
    """Whether a model input (a placeholder) is among ``node``'s inputs, however far up."""
    seen, stack = set(), [node]
    while stack:
        item = stack.pop()
        if item.op == "placeholder":
            return True
        if item not in seen:
            seen.add(item)
            stack.extend(item.all_input_nodes)
    return False


def _twin_reason(node: Node) -> str | None:
    """None when ``_twin`` can build ``node``'s float twin; else why not."""
    if _is_input_bool(node) or _bool_constant(node) is not None:
        return None
    if node.op == "call_function" and node.target in _SHAPE_VIEWS or _is_bool_cast(node):
        return _twin_reason(node.args[0])
    if node.op == "call_function" and node.target in _ANDS:
        parts = [a for a in node.args[:2] if _uniform(a) is not True]
        if len(parts) == 1 and not _broadcast_only(node, parts[0]):
            return f"{node.format_node()} drops an all-True operand but is read as more than a broadcast"
        reasons = [_twin_reason(a) for a in parts if isinstance(a, Node)]
        return next((r for r in reasons if r is not None), None if parts else "it is True everywhere")
    return f"{node.format_node()} is neither a view, an and, nor a bool of a model input"


def _is_input_bool(node: Node) -> bool:
    """A bool input (a model's, or a stage's), or ``bool(x)`` of an integer or bool one."""
    if node.op == "placeholder":
        return getattr(node.meta.get("val"), "dtype", None) == torch.bool
    if node.op != "call_function" or node.target not in _CASTS or not isinstance(node.args[0], Node):
        return False
    source = node.args[0].meta.get("val")
    return (getattr(node.meta.get("val"), "dtype", None) == torch.bool and isinstance(source, torch.Tensor)
            and not source.is_floating_point() and not source.is_complex() and node.args[0].op == "placeholder")


def _bool_constant(node: Node) -> torch.Tensor | None:
    """The bool tensor constant ``node`` reads (a ``get_attr``); else None."""
    if node.op != "get_attr":
        return None
    value = attribute(node.graph.owning_module, node)
    return value if isinstance(value, torch.Tensor) and value.dtype == torch.bool else None


def _is_bool_cast(node: Node) -> bool:
    """A cast of a bool tensor to bool: its values as they are."""
    return (node.op == "call_function" and node.target in _CASTS and isinstance(node.args[0], Node)
            and getattr(node.args[0].meta.get("val"), "dtype", None) == torch.bool
            and getattr(node.meta.get("val"), "dtype", None) == torch.bool)


def _broadcast_only(node: Node, part: object) -> bool:
    """Every reader of ``node`` reads it only broadcast: as an attention mask, or expanded where
    ``part`` (its operand left) has ``node``'s sizes at each kept (-1) dim."""
    shape, kept = node.meta["val"].shape, getattr(part, "meta", {}).get("val")
    for user in node.users:
        if user.target is _SDPA and _mask_of(user) is node:
            continue
        if user.target is aten.expand.default and isinstance(kept, torch.Tensor) and kept.dim() == len(shape):
            if all(size != -1 or str(kept.shape[d]) == str(shape[d]) for d, size in enumerate(user.args[1])):
                continue
        return False
    return True


def _twin(gm: torch.fx.GraphModule, node: Node, made: dict[Node, Node]) -> Node:
    """The float32 0/1 tensor equal to bool ``node`` (``_twin_reason`` said it can be built)."""
    if node in made:
        return made[node]
    graph, constant = gm.graph, _bool_constant(node)
    if constant is not None:  # a float32 constant of its values
        name = _free_name(gm, f"{node.target}_float")
        gm.register_buffer(name, constant.float())
        twin = graph.get_attr(name)
        twin.meta["val"] = _fake(node, constant.float())
    elif _is_bool_cast(node) or node.target is aten.expand.default and _broadcast_only(node, node.args[0]):
        twin = _twin(gm, node.args[0], made)  # an expand attention would do itself: pnnx cannot at dynamic sizes
    elif node.op == "placeholder" or node.target in _CASTS:
        source = node if node.op == "placeholder" else node.args[0]
        value = source
        if source.meta["val"].dtype != torch.bool:  # bool(x) of an integer x: clamp(|x|, 0, 1)
            value = graph.call_function(aten.clamp.default, (graph.call_function(aten.abs.default, (source,)), 0, 1))
        twin = graph.call_function(aten.to.dtype, (value, torch.float32))  # aten::to, which pnnx converts
    elif node.target in _SHAPE_VIEWS:
        twin = graph.call_function(node.target, (_twin(gm, node.args[0], made), *node.args[1:]), dict(node.kwargs))
    else:  # an and
        parts = [_twin(gm, a, made) for a in node.args[:2] if _uniform(a) is not True]
        twin = parts[0] if len(parts) == 1 else graph.call_function(aten.mul.Tensor, tuple(parts))
    made[node] = twin
    return twin
