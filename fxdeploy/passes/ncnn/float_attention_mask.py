"""Give scaled_dot_product_attention an additive float mask instead of a boolean one.

``sdpa(q, k, v, attn_mask=m)`` with a bool ``m`` equals the same call with
``where(m, 0, -inf)``. pnnx folds a constant bool mask into an ncnn MemoryData blob that ncnn's
SDPA layer reads as float, past the end of the data (a heap corruption seen with transformers'
ViT); the float form converts correctly. Only the ncnn pipeline needs it.
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.settings import Settings

_SDPA = torch.ops.aten.scaled_dot_product_attention.default
_MASK_ARG = 3


def float_attention_mask(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not _SDPA:
            continue
        mask = node.args[_MASK_ARG] if len(node.args) > _MASK_ARG else node.kwargs.get("attn_mask")
        value = mask.meta.get("val") if isinstance(mask, torch.fx.Node) else None
        if not isinstance(value, torch.Tensor) or value.dtype != torch.bool:
            continue
        query = node.args[0].meta.get("val")
        dtype = query.dtype if isinstance(query, torch.Tensor) else torch.float32
        with gm.graph.inserting_before(node):
            additive = gm.graph.call_function(torch.ops.aten.where.Scalar, (mask, 0.0, float("-inf")))
            additive.meta["val"] = torch.empty_like(value, dtype=torch.float32)
            if dtype != torch.float32:
                cast = torch.ops.aten._to_copy.default
                additive = gm.graph.call_function(cast, (additive,), {"dtype": dtype})
                additive.meta["val"] = torch.empty_like(value, dtype=dtype)
        if len(node.args) > _MASK_ARG:
            node.update_arg(_MASK_ARG, additive)
        else:
            node.update_kwarg("attn_mask", additive)
        modified = True
    return PassResult(gm, modified)
