"""Dropout is the identity at inference; remove it so no target sees a training-only op."""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.settings import Settings

aten = torch.ops.aten

DROPOUT_OPS = frozenset(
    {aten.dropout.default, aten.feature_dropout.default, aten.alpha_dropout.default}
)


def remove_dropout(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        if node.target in DROPOUT_OPS:
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
            modified = True
        elif node.target is aten.native_dropout.default:
            modified |= _replace_native_dropout(gm, node)
    return PassResult(gm, modified)


def _replace_native_dropout(gm: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """native_dropout returns (out, mask); only the output half can be replaced safely."""
    users = list(node.users)
    getitems = [u for u in users if u.target.__name__ == "getitem"]
    if len(getitems) != len(users) or any(u.args[1] != 0 for u in getitems):
        return False
    for user in getitems:
        user.replace_all_uses_with(node.args[0])
        gm.graph.erase_node(user)
    gm.graph.erase_node(node)
    return True
