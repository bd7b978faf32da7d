"""An attention mask broadcast over the queries is expanded to them, for ONNX Runtime.

``nn.MultiheadAttention`` with a ``key_padding_mask`` (and so ``nn.TransformerEncoder`` with a
``src_key_padding_mask``) calls ``scaled_dot_product_attention`` with a mask of shape
[B, heads, 1, keys]: one row, broadcast over every query. The exporter writes it as ONNX's
``Attention``, whose mask is broadcastable by the standard, but ONNX Runtime's CPU kernel requires
its second-to-last dim to be the query count ("inconsistent q_sequence_length (between attn_mask
and Q)") and fails at run time. Expanding the mask over the queries is what the broadcast means,
so the attention computes the same values; the kernel then accepts it.
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import fill_meta
from fxdeploy.settings import Settings

aten = torch.ops.aten
_SDPA = aten.scaled_dot_product_attention.default
_MASK_ARG = 3


def query_sized_masks(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if check(node) is not None:
            continue
        mask, query = _mask(node), node.args[0]
        rank = mask.meta["val"].dim()
        with gm.graph.inserting_before(node):
            queries = query.meta["val"].shape[-2]
            if isinstance(queries, torch.SymInt):
                queries = gm.graph.call_function(aten.sym_size.int, (query, query.meta["val"].dim() - 2))
                queries.meta["val"] = query.meta["val"].shape[-2]
            expanded = gm.graph.call_function(aten.expand.default, (mask, [-1] * (rank - 2) + [queries, -1]))
        expanded.meta.update({k: v for k, v in mask.meta.items() if k != "val"})
        fill_meta([expanded])
        if len(node.args) > _MASK_ARG:
            node.update_arg(_MASK_ARG, expanded)
        else:
            node.update_kwarg("attn_mask", expanded)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def check(node: torch.fx.Node) -> str | None:
    """None when ``node`` is an attention whose mask has one row broadcast over several queries."""
    if node.op != "call_function" or node.target is not _SDPA:
        return "not aten.scaled_dot_product_attention"
    mask, query = _mask(node), node.args[0]
    if not isinstance(mask, torch.fx.Node) or not isinstance(mask.meta.get("val"), torch.Tensor):
        return "no mask, or no shape recorded for it"
    value, queries = mask.meta["val"], query.meta["val"].shape[-2]
    if value.dim() < 2 or not isinstance(value.shape[-2], int) or value.shape[-2] != 1:
        return f"the mask's shape {list(value.shape)} already has a row per query (or is not [..., 1, keys])"
    if isinstance(queries, int) and queries == 1:
        return "one query: its one mask row is not broadcast"
    return None


def _mask(node: torch.fx.Node) -> object:
    return node.args[_MASK_ARG] if len(node.args) > _MASK_ARG else node.kwargs.get("attn_mask")
