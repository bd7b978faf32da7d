"""Drop runtime assertions: deployed engines cannot raise, and torch re-derives them on export."""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.settings import Settings

aten = torch.ops.aten

ASSERT_OPS = frozenset(
    {
        aten._assert_scalar.default,
        aten._assert_tensor_metadata.default,
        aten._assert_async.msg,
        aten._assert_async.default,
        aten.sym_constrain_range.default,
        aten.sym_constrain_range_for_size.default,
    }
)


def remove_asserts(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in reversed(list(gm.graph.nodes)):
        if node.op == "call_function" and node.target in ASSERT_OPS and not node.users:
            gm.graph.erase_node(node)
            modified = True
    if modified:
        gm.graph.eliminate_dead_code()
    return PassResult(gm, modified)
