"""Remove ops that only copy or re-label a tensor: detach, alias, clone, same-dtype casts."""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.settings import Settings

aten = torch.ops.aten

IDENTITY_OPS = frozenset({aten.detach.default, aten.alias.default, aten.lift_fresh_copy.default})


def remove_noops(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and _is_noop(node):
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
            modified = True
    return PassResult(gm, modified)


def _is_noop(node: torch.fx.Node) -> bool:
    if node.target in IDENTITY_OPS:
        return True
    source = node.args[0] if node.args else None
    if not isinstance(source, torch.fx.Node) or source.op == "placeholder":
        return False  # keep copies of inputs: an output must not alias an input buffer
    if node.target is aten.clone.default:
        return node.kwargs.get("memory_format") in (None, torch.preserve_format)
    if node.target is aten._to_copy.default:
        return _same_tensor_meta(node, source) and set(node.kwargs) <= {"dtype", "device", "layout"}
    return False


def _same_tensor_meta(node: torch.fx.Node, source: torch.fx.Node) -> bool:
    out, inp = node.meta.get("val"), source.meta.get("val")
    if not isinstance(out, torch.Tensor) or not isinstance(inp, torch.Tensor):
        return False
    return out.dtype == inp.dtype and out.device == inp.device
