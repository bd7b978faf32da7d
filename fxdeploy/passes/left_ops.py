"""Why a pass left an op that the ONNX lowering then has no translation for.

torch.onnx has no translation for ``median``, ``kthvalue``, ``cummax``/``cummin``, ``cdist`` or
``isin``/``searchsorted``; fxdeploy's passes rewrite them where that gives torch's values exactly,
and leave the others with a reason (each pass's ``check``). A lowering that then fails on such a
node says that reason, which tells the user what to change (read only a median's values, say),
rather than torch.onnx's "No ONNX function found".
"""

from __future__ import annotations

import torch

from fxdeploy.passes import order_statistics, pairwise_distances, running_extrema, value_lookups
from fxdeploy.passes.graph_utils import written_in_place

aten = torch.ops.aten


def why_left(gm: torch.fx.GraphModule, node: torch.fx.Node) -> str | None:
    """The pass that rewrites ``node``'s op where it can, and why it left this one; None for another op."""
    if node.target in (*order_statistics.WITH_INDICES, aten.median.default):
        name, reason = "order_statistics", order_statistics.check(node)
    elif node.target in running_extrema.RUNNING:
        name, reason = "running_extrema", running_extrema.check(node)
    elif node.target in pairwise_distances.CDIST:
        name, reason = "pairwise_distances", pairwise_distances.check(node)
    elif node.target in (*value_lookups.ISIN, aten.searchsorted.Tensor):
        name, reason = "value_lookups", value_lookups.check(gm, node, written_in_place(gm.graph))
    else:
        return None
    rewrites = f"fxdeploy's {name} pass rewrites {node.target} where it gives torch's values"
    if reason is None:  # the pass would rewrite it: this target's pipeline does not run it
        return f"{rewrites}; this target does not run it"
    return f"{rewrites}, and left this one: {reason}"
