"""Drop the inputs of a ``cat`` that hold no element.

A cat's empty inputs add nothing to it: ``cat([x[:, :0], x], 1)`` is ``x``'s values, as is the
accumulation idiom ``out = torch.zeros(0, 6); out = torch.cat([out, rows])``. pnnx never returns
on such a graph (no CPU used; seen with ``torch.cat([x[:, :0], x], 1)`` at a dynamic batch), so
lower() would wait out its converter's timeout. The rule holds wherever it fires: an input goes
only when its size is a static 0, and only where every input left has the cat's dtype (an empty
float input still promotes an integer cat). A cat left with one input stays a cat (a copy).
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.settings import Settings

aten = torch.ops.aten


def empty_cat_inputs(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in gm.graph.nodes:
        reason = check(node)
        if reason is not None:
            continue
        kept = [x for x in node.args[0] if not _empty(x)]
        node.args = (kept, *node.args[1:])
        modified = True
    if modified:
        gm.graph.eliminate_dead_code()
    return PassResult(gm, modified)


def check(node: torch.fx.Node) -> str | None:
    """None where the rule applies to ``node``, else why not."""
    if node.op != "call_function" or node.target is not aten.cat.default:
        return "not aten.cat"
    inputs = node.args[0]
    out = node.meta.get("val")
    if not isinstance(out, torch.Tensor) or not all(isinstance(x, torch.fx.Node) for x in inputs):
        return "no tensor metadata"
    empty = [x for x in inputs if _empty(x)]
    kept = [x for x in inputs if x not in empty]
    if not empty:
        return "no input is empty"
    if not kept:
        return "every input is empty"
    if any(x.meta["val"].dtype != out.dtype for x in kept):
        return "an empty input promotes the dtype"
    return None


def _empty(x: torch.fx.Node) -> bool:
    value = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    return isinstance(value, torch.Tensor) and any(isinstance(d, int) and d == 0 for d in value.shape)
