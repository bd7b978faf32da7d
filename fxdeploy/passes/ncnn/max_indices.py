"""Spell ``torch.max(x, dim)`` whose indices are used as ``amax`` plus ``argmax``.

A detector's best class per box is ``scores.max(-1)``: the best score and its class. ncnn has no
layer for the indices (its ArgMax reduces the whole blob, not an axis), and pnnx cannot write a
``torch.max`` whose second output is read. As ``amax`` (a max Reduction ncnn has) and ``argmax``
(the first index of the maximum, as ``max`` returns), the argmax joins the host stage that reads
it, and the engine hands over the scores it is taken from.
"""

from __future__ import annotations

import operator

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import fill_meta
from fxdeploy.settings import Settings

aten = torch.ops.aten


def max_indices(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        reason = check(node)
        if reason:
            continue
        source, dim = node.args[0], node.args[1]
        keepdim = bool(node.args[2]) if len(node.args) > 2 else bool(node.kwargs.get("keepdim", False))
        replacements = {0: aten.amax.default, 1: aten.argmax.default}
        for item in list(node.users):
            with gm.graph.inserting_before(item):
                args = (source, [dim], keepdim) if item.args[1] == 0 else (source, dim, keepdim)
                new = gm.graph.call_function(replacements[item.args[1]], args)
            fill_meta([new])
            new.meta["stack_trace"] = item.meta.get("stack_trace", node.meta.get("stack_trace"))
            item.replace_all_uses_with(new)
            gm.graph.erase_node(item)
        gm.graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def check(node: torch.fx.Node) -> str:
    """Empty when ``node`` is a ``max.dim`` whose indices are read; else why it does not match."""
    if node.op != "call_function" or node.target is not aten.max.dim:
        return "not aten.max.dim"
    items = list(node.users)
    if not all(u.op == "call_function" and u.target is operator.getitem for u in items):
        return "an output is read other than by item"
    if not any(u.args[1] == 1 for u in items):
        return "its indices are not read"
    return ""
