"""``aten._transformer_encoder_layer_fwd``, PyTorch's fused encoder layer, spelt with public ops.

In eval mode without grad, ``nn.TransformerEncoderLayer`` runs its "fast path": one fused op for
the whole layer. Non-strict ``torch.export`` does not take it, but dynamo does, so a strict capture
and every ``torch.compile`` graph of a transformer encoder holds the op, which no ONNX exporter,
OpenVINO or pnnx translates ("No ONNX function found for aten._transformer_encoder_layer_fwd").

The op is the post- or pre-norm encoder layer: a packed in-projection split into heads, attention
scaled by 1/sqrt(head size), the out-projection, residuals, layer norms and a ReLU or exact GELU
feed-forward. Its mask is read as masked-out where nonzero (a float mask is cast to bool), of shape
[L, L] (mask type 0), [B, L] (1, key padding) or [B, heads, L, L] (2). The spelling computes the
same layer with ``linear``, ``scaled_dot_product_attention`` (its bool mask True where attended),
``layer_norm`` and the activation; a row whose every key is masked is the one difference (the fused
op gives NaN there, the attention 0).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx.proxy import GraphAppendingTracer, Proxy

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import fill_meta
from fxdeploy.settings import Settings

aten = torch.ops.aten
_FUSED = aten._transformer_encoder_layer_fwd.default
_NAMES = ("src", "embed_dim", "num_heads", "qkv_weight", "qkv_bias", "proj_weight", "proj_bias", "use_gelu",
          "norm_first", "eps", "norm_weight_1", "norm_bias_1", "norm_weight_2", "norm_bias_2", "ffn_weight_1",
          "ffn_bias_1", "ffn_weight_2", "ffn_bias_2", "mask", "mask_type")


def dense_encoder_layers(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if check(node) is not None:
            continue
        known = set(gm.graph.nodes)
        with gm.graph.inserting_before(node):
            dense = _layer(**_proxies(_arguments(node), GraphAppendingTracer(gm.graph))).node
        new = [n for n in gm.graph.nodes if n not in known]
        for inserted in new:
            inserted.meta.update({k: v for k, v in node.meta.items() if k not in ("val", "tensor_meta")})
        fill_meta(new)
        node.replace_all_uses_with(dense)
        gm.graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def check(node: torch.fx.Node) -> str | None:
    """None when ``node`` is the fused encoder layer on a dense [B, L, E] input, else why not."""
    if node.op != "call_function" or node.target is not _FUSED:
        return "not aten._transformer_encoder_layer_fwd"
    arguments = _arguments(node)
    src = arguments["src"].meta.get("val")
    if not isinstance(src, torch.Tensor) or src.dim() != 3 or src.is_nested:
        return "its input is not a dense [batch, length, embed] tensor"
    if arguments["mask"] is not None and arguments["mask_type"] not in (0, 1, 2):
        return f"mask type {arguments['mask_type']!r} is none of 0 ([L, L]), 1 ([B, L]), 2 ([B, heads, L, L])"
    return None


def _proxies(arguments: dict[str, Any], tracer: GraphAppendingTracer) -> dict[str, Any]:
    """The op's arguments with each node a proxy: the spelling's ops then append to the graph."""
    return torch.fx.node.map_arg(arguments, lambda n: Proxy(n, tracer))


def _arguments(node: torch.fx.Node) -> dict[str, Any]:
    given = dict(zip(_NAMES, node.args, strict=False))
    given.update(node.kwargs)
    given.setdefault("mask", None)
    given.setdefault("mask_type", None)
    return given


def _layer(src: Any, embed_dim: int, num_heads: int, qkv_weight: Any, qkv_bias: Any, proj_weight: Any,
           proj_bias: Any, use_gelu: bool, norm_first: bool, eps: float, norm_weight_1: Any, norm_bias_1: Any,
           norm_weight_2: Any, norm_bias_2: Any, ffn_weight_1: Any, ffn_bias_1: Any, ffn_weight_2: Any,
           ffn_bias_2: Any, mask: Any, mask_type: int | None) -> Any:
    def norm(x: Any, weight: Any, bias: Any) -> Any:
        return aten.layer_norm.default(x, [embed_dim], weight, bias, eps)

    def feed_forward(x: Any) -> Any:
        hidden = aten.linear.default(x, ffn_weight_1, ffn_bias_1)
        hidden = aten.gelu.default(hidden) if use_gelu else aten.relu.default(hidden)
        return aten.linear.default(hidden, ffn_weight_2, ffn_bias_2)

    def attention(x: Any) -> Any:
        batch, length = aten.sym_size.int(x, 0), aten.sym_size.int(x, 1)
        qkv = aten.linear.default(x, qkv_weight, qkv_bias)
        qkv = aten.view.default(qkv, [batch, length, 3, num_heads, embed_dim // num_heads])
        qkv = aten.permute.default(qkv, [2, 0, 3, 1, 4])
        q, k, v = (aten.select.int(qkv, 0, i) for i in range(3))
        out = aten.scaled_dot_product_attention.default(q, k, v, _attended(mask, mask_type, batch, length))
        out = aten.clone.default(aten.transpose.int(out, 1, 2), memory_format=torch.contiguous_format)
        out = aten.view.default(out, [batch, length, embed_dim])
        return aten.linear.default(out, proj_weight, proj_bias)

    if norm_first:
        x = aten.add.Tensor(src, attention(norm(src, norm_weight_1, norm_bias_1)))
        return aten.add.Tensor(x, feed_forward(norm(x, norm_weight_2, norm_bias_2)))
    x = norm(aten.add.Tensor(src, attention(src)), norm_weight_1, norm_bias_1)
    return norm(aten.add.Tensor(x, feed_forward(x)), norm_weight_2, norm_bias_2)


def _attended(mask: Any, mask_type: int | None, batch: Any, length: Any) -> Any:
    """The fused op's mask (masked where nonzero) as attention's bool mask (True where attended)."""
    if mask is None:
        return None
    attended = aten.logical_not.default(aten._to_copy.default(mask, dtype=torch.bool))
    if mask_type == 1:  # key padding: one row per image, broadcast over heads and queries
        return aten.view.default(attended, [batch, 1, 1, length])
    return attended  # [L, L] broadcast over batch and heads, or [B, heads, L, L]
