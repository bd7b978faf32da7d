"""Spell a strided slice (``x[..., a:b:s]``, s > 1) as a contiguous slice, a reshape and a select.

ncnn's Crop layer has no step, and pnnx leaves a stepped ``Tensor.slice`` unconverted, so a box
decoder's ``deltas[:, 0::4]`` or a clip's ``boxes[..., 0::2]`` stopped an ncnn lowering. Along a dim
of static size ``n``, the ``count`` elements ``a, a+s, ..., a+(count-1)*s`` are the ``p``-th column
of ``count`` consecutive blocks of ``s``:

    x[..., a::s]  ==  x[..., a-p : a-p+count*s].unflatten(-1, (count, s))[..., p]

for any ``p`` that keeps the blocks inside ``[0, n)``. Where no ``p`` does (``n=5, 0::2`` needs 6),
the last element is sliced on its own and concatenated. Each piece is a layer ncnn has (Crop,
Reshape, Crop-and-squeeze, Concat), and the values are the same elements, bit for bit.

Left alone: a step on dim 0 (ncnn's implicit batch axis) and a step on a dynamic dim (the blocks
would have a size known only at run time).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import call_site, fill_meta
from fxdeploy.settings import Settings

logger = logging.getLogger(__name__)
aten = torch.ops.aten


def strided_slices(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.slice.Tensor:
            continue
        plan = _plan(node)
        if isinstance(plan, str):
            if plan:
                logger.debug("strided_slices: %s stays stepped: %s", call_site(node), plan)
            continue
        before = set(gm.graph.nodes)
        with gm.graph.inserting_before(node):
            replacement = _emit(gm.graph, node.args[0], *plan)
        fill_meta([n for n in gm.graph.nodes if n not in before])
        node.replace_all_uses_with(replacement)
        gm.graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def _plan(node: torch.fx.Node) -> tuple[int, int, int, int, int] | str:
    """(dim, start, step, count, size) of a strided slice to rewrite; else why not ("" for a
    slice without a step)."""
    args = {"dim": 0, "start": None, "end": None, "step": 1}
    args.update(zip(("self", *args), node.args, strict=False))
    args.update(node.kwargs)
    source, start, end, step = args["self"], args["start"], args["end"], args["step"]
    if step in (None, 1):
        return ""
    value = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor) or value.dim() == 0:
        return "its input has no tensor metadata"
    if not all(isinstance(v, int | None) for v in (args["dim"], start, end, step)):
        return "its bounds are computed at run time"
    dim = args["dim"] % value.dim()
    size = value.shape[dim]
    if dim == 0:
        return "it steps along dim 0, ncnn's batch axis"
    if not isinstance(size, int):
        return f"it steps along dim {dim}, whose size ({size}) is dynamic"
    first, stop, _ = slice(start, end).indices(size)
    count = max(0, math.ceil((stop - first) / step))
    if count == 0:
        return "it is empty"
    return dim, first, step, count, size


def _emit(graph: torch.fx.Graph, source: torch.fx.Node, dim: int, start: int, step: int, count: int,
          size: int) -> torch.fx.Node:
    if count == 1:
        return graph.call_function(aten.slice.Tensor, (source, dim, start, start + 1))
    lowest = max(0, start + count * step - size)
    if lowest > min(step - 1, start):  # no block layout fits: the last element goes on its own
        head = _emit(graph, source, dim, start, step, count - 1, size)
        last = start + (count - 1) * step
        tail = graph.call_function(aten.slice.Tensor, (source, dim, last, last + 1))
        return graph.call_function(aten.cat.default, ([head, tail], dim))
    begin = start - lowest
    blocks = graph.call_function(aten.slice.Tensor, (source, dim, begin, begin + count * step))
    shape = _sizes(graph, source)
    shaped = graph.call_function(aten.view.default, (blocks, [*shape[:dim], count, step, *shape[dim + 1:]]))
    return graph.call_function(aten.select.int, (shaped, dim + 1, lowest))


def _sizes(graph: torch.fx.Graph, source: torch.fx.Node) -> list[Any]:
    """The source's sizes as view() arguments: ints, and a sym_size node for each dynamic dim."""
    value = source.meta["val"]
    return [
        size if isinstance(size, int) else graph.call_function(aten.sym_size.int, (source, i))
        for i, size in enumerate(value.shape)
    ]
