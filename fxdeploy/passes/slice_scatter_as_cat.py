"""``slice_scatter`` of a static range as ``cat`` of the parts it keeps and the slice it writes.

``x[..., 0:4] = boxes`` is ``slice_scatter(x, boxes, dim=-1, start=0, end=4)``. torch.onnx writes it
as a ScatterND over the dim moved to the front: a Transpose of the whole tensor before and after.
On a batched detection head (``[8, 2100, 84]``, its dim 2) ONNX Runtime's Transpose of three dims
took 80 ms of a 220 ms call; as ``cat([boxes, x[..., 4:]], -1)`` it is one copy.

Exact where it fires: a step of 1 and a static size along ``dim``, so the parts are known:
``x[:start]``, ``src``, ``x[end:]`` along ``dim`` (empty parts left out) are the result, element for
element.
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import fill_meta
from fxdeploy.settings import Settings

aten = torch.ops.aten


def slice_scatter_as_cat(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    return PassResult(gm, rewrite(gm))


def rewrite(gm: torch.fx.GraphModule) -> bool:
    """Rewrite every ``slice_scatter`` that :func:`check` allows, in place; True where one was."""
    graph, modified = gm.graph, False
    for node in list(graph.nodes):
        bounds = check(node)
        if isinstance(bounds, str):
            continue
        x, src, dim = node.args[0], node.args[1], _dim(node)
        start, end, size = bounds
        with graph.inserting_before(node):
            parts = [graph.call_function(aten.slice.Tensor, (x, dim, 0, start))] if start > 0 else []
            parts.append(src)
            if end < size:
                parts.append(graph.call_function(aten.slice.Tensor, (x, dim, end, size)))
            cat = graph.call_function(aten.cat.default, (parts, dim))
        new = [p for p in parts if p is not src] + [cat]
        for n in new:
            n.meta.update({k: v for k, v in node.meta.items() if k != "val"})
        fill_meta(new)
        node.replace_all_uses_with(cat)
        graph.erase_node(node)
        modified = True
    if modified:
        gm.recompile()
    return modified


def check(node: torch.fx.Node) -> tuple[int, int, int] | str:
    """``(start, end, size)`` along the dim where ``node`` is a ``slice_scatter`` with a step of 1,
    a static size along its dim and int bounds that write at least one slice; else why not."""
    if node.op != "call_function" or node.target is not aten.slice_scatter.default:
        return "not a slice_scatter"
    args = list(node.args) + [None] * (6 - len(node.args))
    start, end, step = (node.kwargs.get(k, a) for k, a in zip(("start", "end", "step"), args[3:6], strict=True))
    if (step if step is not None else 1) != 1:
        return "a step other than 1"
    value = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
    if not isinstance(value, torch.Tensor):
        return "its input has no recorded shape"
    size = value.shape[_dim(node) % value.dim()]
    start, end = 0 if start is None else start, size if end is None else end
    if not all(isinstance(v, int) for v in (size, start, end)):
        return "a dynamic size or bound along its dim"
    start, end = (max(0, min(v + size if v < 0 else v, size)) for v in (start, end))
    if end <= start:
        return "it writes nothing"
    return start, end, size


def _dim(node: torch.fx.Node) -> int:
    return node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
