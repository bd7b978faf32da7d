"""Dropout is the identity at inference; remove it so no target sees a training-only op.

Only where it is the identity: ``train`` False (what ``nn.Dropout`` gives in eval mode), or a
probability of 0. ``F.dropout(x, p, training=True)`` draws a new mask on every call even in eval
mode; it stays, and ``refuse_random_ops`` names it.
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.settings import Settings

aten = torch.ops.aten

DROPOUT_OPS = frozenset(
    {aten.dropout.default, aten.feature_dropout.default, aten.alpha_dropout.default,
     aten.feature_alpha_dropout.default}
)


def remove_dropout(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if check(node) is not None:
            continue
        if node.target in DROPOUT_OPS:
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
            modified = True
        else:
            modified |= _replace_native_dropout(gm, node)
    return PassResult(gm, modified)


def check(node: torch.fx.Node) -> str | None:
    """None when ``node`` is a dropout that returns its input, else why not."""
    if node.op != "call_function" or node.target not in (*DROPOUT_OPS, aten.native_dropout.default):
        return "not a dropout"
    p = node.args[1] if len(node.args) > 1 else node.kwargs.get("p")
    train = node.args[2] if len(node.args) > 2 else node.kwargs.get("train")
    if train is False or p == 0:
        return None
    return f"train={train!r} with p={p!r}: a random mask on every call, not the identity"


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
