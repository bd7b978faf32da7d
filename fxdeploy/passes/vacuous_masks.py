"""Drop a boolean attention mask that is True everywhere.

transformers builds an attention mask even when the caller gives none: ViT's layers (and other
encoders under ``create_bidirectional_mask``) get ``kv_idx >= 0`` over ``arange(sequence)``,
expanded to [B, 1, L, S]. Every element is True, so ``sdpa(q, k, v, attn_mask=mask)`` equals
``sdpa(q, k, v)``. At a fixed size pnnx folds the mask into a constant; at a dynamic height/width
the sequence length is a run-time size, and pnnx leaves ``torch.arange``, ``torch.ge``,
``Tensor.expand`` and ``torch.where`` for it, which ncnn cannot run. Without the mask, ncnn's
MultiHeadAttention takes the layer alone.

A mask is all True when the graph proves it: ``ge(x, c)`` with ``c <= 0`` and ``x`` an ``arange``
from a non-negative start by a positive step (through views, plus non-negative offsets), views and copies of an all-True
mask, ``and`` of two of them, or a ``full``/``ones`` of True. Anything else is left alone.
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.settings import Settings

aten = torch.ops.aten
_SDPA = aten.scaled_dot_product_attention.default
_MASK_ARG = 3
_VIEWS = {
    aten.expand.default, aten.unsqueeze.default, aten.view.default, aten.reshape.default,
    aten._unsafe_view.default, aten.permute.default, aten.transpose.int, aten.clone.default,
    aten.alias.default, aten.slice.Tensor, aten.select.int, aten.squeeze.dim, aten.squeeze.default,
    aten.contiguous.default, aten.repeat.default,
}
"""Ops whose output elements are all taken from their first operand's."""
_ANDS = {aten.logical_and.default, aten.bitwise_and.Tensor, aten.__and__.Tensor}
_AT_LEAST = {aten.ge.Scalar: 0, aten.gt.Scalar: -1}
"""``op(x, c)`` is True everywhere when every x >= 0 and c <= the value given here."""


def vacuous_masks(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not _SDPA:
            continue
        in_args = len(node.args) > _MASK_ARG
        mask = node.args[_MASK_ARG] if in_args else node.kwargs.get("attn_mask")
        value = mask.meta.get("val") if isinstance(mask, torch.fx.Node) else None
        if not isinstance(value, torch.Tensor) or value.dtype != torch.bool or not _all_true(mask):
            continue
        if in_args:
            node.update_arg(_MASK_ARG, None)
        else:
            node.update_kwarg("attn_mask", None)
        modified = True
    if modified:
        gm.graph.eliminate_dead_code()
    return PassResult(gm, modified)


def _all_true(node: object) -> bool:
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return False
    if node.target in _VIEWS:
        return _all_true(node.args[0])
    if node.target in _ANDS:
        return _all_true(node.args[0]) and _all_true(node.args[1])
    if node.target in _AT_LEAST:
        bound = node.args[1]
        return isinstance(bound, (int, float)) and bound <= _AT_LEAST[node.target] and _non_negative(node.args[0])
    value = node.meta.get("val")
    is_bool = isinstance(value, torch.Tensor) and value.dtype == torch.bool
    if node.target is aten.full.default:
        return is_bool and isinstance(node.args[1], (bool, int, float)) and bool(node.args[1])
    return node.target is aten.ones.default and is_bool


def _non_negative(node: object) -> bool:
    """Every element of an integer tensor is >= 0: an ``arange`` counting up from 0 or more."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return False
    if node.target in _VIEWS:
        return _non_negative(node.args[0])
    if node.target is aten.arange.default:
        return True
    if node.target in (aten.add.Tensor, aten.add.Scalar):  # an offset: transformers' kv_idx is arange + 0
        alpha = node.kwargs.get("alpha", 1)
        return isinstance(alpha, (int, float)) and alpha >= 0 and all(
            _non_negative(a) or (isinstance(a, (int, float)) and a >= 0) for a in node.args[:2]
        )
    if node.target in (aten.arange.start, aten.arange.start_step):
        start = node.args[0]
        step = node.args[2] if len(node.args) > 2 else node.kwargs.get("step", 1)
        return isinstance(start, int) and start >= 0 and isinstance(step, int) and step > 0
    return False
