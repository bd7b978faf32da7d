"""Spell functionalization's fills as the factory ops they stand for, which torch.jit.trace records.

A write of one value through a view, ``y[:, 1:3].zero_()`` or ``y[0].fill_(3)``, is functionalized
into ``zero(view)`` or ``fill.Scalar(view, 3)`` and a scatter of that back into ``y``. ncnn's
lowering traces the passed graph with torch.jit.trace for pnnx, and the tracer records these two
(and ``fill.Tensor``) as an ``aten::zeros_like`` or ``aten::fill_`` it has no schema for: torch
fails with "INTERNAL ASSERT FAILED ... We don't have an op for aten::zeros_like". Each has an exact
factory form, of its input's shape, dtype and device, that the tracer and pnnx know:

    zero(x)            zeros_like(x)
    fill.Scalar(x, v)  full_like(x, v)                      v cast to x's dtype by both
    fill.Tensor(x, t)  mul(ones_like(x), t.to(x.dtype))     1 * t is t, for -0, inf and NaN too
"""

from __future__ import annotations

import torch
from torch.fx import Node

from fxdeploy.passes.base import PassResult
from fxdeploy.settings import Settings

aten = torch.ops.aten


def functional_fills(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if check(node) is not None:
            continue
        if node.target is aten.zero.default:
            node.target, node.args = aten.zeros_like.default, (node.args[0],)  # meta['val'] stays: same values
        elif node.target is aten.fill.Scalar:
            node.target = aten.full_like.default
        else:
            _fill_with_tensor(gm.graph, node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def check(node: Node) -> str | None:
    """None when ``node`` is a functional ``zero`` or ``fill`` of a tensor with a known dtype; else why not."""
    if node.op != "call_function" or node.target not in (aten.zero.default, aten.fill.Scalar, aten.fill.Tensor):
        return "not aten.zero or aten.fill"
    if node.kwargs:
        return f"keyword arguments {sorted(node.kwargs)}"
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return "no tensor value recorded for its output"
    if node.target is aten.fill.Tensor and not isinstance(node.args[1], Node):
        return "its fill is not a tensor of the graph"
    return None


def _fill_with_tensor(graph: torch.fx.Graph, node: Node) -> None:
    source, fill = node.args[0], node.args[1]
    dtype, value = node.meta["val"].dtype, fill.meta.get("val")
    with graph.inserting_before(node):
        ones = graph.call_function(aten.ones_like.default, (source,))
        cast = fill
        if not isinstance(value, torch.Tensor) or value.dtype != dtype:  # pnnx has no _to_copy: only where needed
            cast = graph.call_function(aten._to_copy.default, (fill,), {"dtype": dtype})
            cast.meta.update(fill.meta)
            if isinstance(value, torch.Tensor):
                cast.meta["val"] = value.to(dtype)
        product = graph.call_function(aten.mul.Tensor, (ones, cast))
    ones.meta.update(node.meta)
    product.meta.update(node.meta)
    node.replace_all_uses_with(product)
    graph.erase_node(node)
