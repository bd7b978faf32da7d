"""Drop an attention mask that masks nothing: True everywhere (boolean), or 0 (additive).

transformers builds attention masks even when nothing is masked. ViT's layers (and other encoders
under ``create_bidirectional_mask``) get ``kv_idx >= 0`` over ``arange(sequence)``, expanded to
[B, 1, L, S]; DETR's come from a pixel mask of ones (no padding), resized to the feature map and
indexed per query and key. ``sdpa(q, k, v, attn_mask=mask)`` then equals ``sdpa(q, k, v)``. At a
fixed size pnnx folds such a mask into a constant; at a dynamic height/width the sizes are run-time
values, and pnnx leaves ``torch.arange``, ``torch.ge``, ``Tensor.expand``, ``torch.where`` and a
dynamic ``Tensor.reshape`` in ncnn's MultiHeadAttention for it, which ncnn cannot run.

The graph must prove the value: a mask of ones, zeros or a fill, ``ge(x, c)`` with ``c <= 0`` over
an ``arange`` from a non-negative start by a positive step (plus non-negative offsets), and views,
casts, nearest resizes, index picks and ``and`` of such. Anything else is left alone.
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import attribute
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
_PICKS = {
    aten.upsample_nearest2d.vec, aten.upsample_nearest2d.default, aten.index.Tensor, aten.flatten.using_ints,
    aten.gather.default, aten.index_select.default,
}
"""More ops whose output elements are all some of their first operand's."""
_CASTS = {aten.to.dtype, aten.to.device, aten.to.dtype_layout, aten._to_copy.default}
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
        if not isinstance(value, torch.Tensor):
            continue
        uniform, attends = _uniform(mask), (True if value.dtype == torch.bool else 0.0)
        if uniform is None or uniform != attends:
            continue
        if in_args:
            node.update_arg(_MASK_ARG, None)
        else:
            node.update_kwarg("attn_mask", None)
        modified = True
    if modified:
        gm.graph.eliminate_dead_code()
    return PassResult(gm, modified)


def _uniform(node: object) -> bool | int | float | None:
    """The value every element of ``node`` holds, where the graph proves there is one; else None."""
    if isinstance(node, torch.fx.Node) and node.op == "get_attr":
        return _constant_fill(node)
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return None
    target, args = node.target, node.args
    if target in _VIEWS or target in _PICKS:
        return _uniform(args[0])
    if target in _CASTS:
        return _cast(_uniform(args[0]), node)
    if target in _ANDS:
        both = (_uniform(args[0]), _uniform(args[1]))
        return None if None in both else bool(both[0]) and bool(both[1])
    if target in _AT_LEAST:
        bound = args[1]
        if isinstance(bound, (int, float)) and bound <= _AT_LEAST[target] and _non_negative(args[0]):
            return True
        return None
    if target in (aten.ones.default, aten.new_ones.default):
        return _cast(1, node)
    if target in (aten.zeros.default, aten.new_zeros.default):
        return _cast(0, node)
    fill = {aten.full.default: 1, aten.new_full.default: 2}.get(target)
    if fill is not None and isinstance(args[fill], (bool, int, float)):
        return _cast(args[fill], node)
    return None


def _constant_fill(node: torch.fx.Node) -> bool | int | float | None:
    """The one value a constant (a buffer, a folded value) holds everywhere; None for a parameter (its
    values may change after capture), a large constant or one that holds more than one value."""
    value = attribute(node.graph.owning_module, node)
    if not isinstance(value, torch.Tensor) or isinstance(value, torch.nn.Parameter) or not 0 < value.numel() <= 1 << 20:
        return None
    first = value.reshape(-1)[0]
    return first.item() if bool((value == first).all()) else None


def _cast(value: bool | int | float | None, node: torch.fx.Node) -> bool | int | float | None:
    """``value`` in the dtype of ``node``'s result."""
    dtype = getattr(node.meta.get("val"), "dtype", None)
    if value is None or dtype is None:
        return None
    if dtype == torch.bool:
        return bool(value)
    if dtype.is_floating_point:
        return float(value)
    return int(value) if float(value).is_integer() else None


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
