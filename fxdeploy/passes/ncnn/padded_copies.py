"""Spell "fill a new buffer, copy an image into its top-left corner" as a pad of the image.

torchvision's ``GeneralizedRCNNTransform.batch_images`` batches images this way:

    batched = images[0].new_full(batch_shape, 0)
    batched[i, :c, :h, :w].copy_(image)

The captured graph keeps the in-place ``copy_`` into a view of ``batched``. pnnx does not see that
write: it treats ``batched`` as the constant fill and folds the whole network after it into
constants, so the ncnn model ignores its input (SSD's scores and boxes came out as MemoryData).
Out of place, the buffer after the copy is the image padded on the right of each dim with the fill
value, which ncnn's Padding layer runs:

    constant_pad_nd(image[None], [0, W - w, 0, H - h, 0, C - c, 0, 0], fill)

Rewritten only where that is exactly the value: a buffer made by new_full/full/new_zeros/zeros
(with a constant fill), written once by a ``copy_`` through selects of size-1 dims, squeezes and
slices that start at 0 with step 1, with a source of the region's shape, and read only after
the copy.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import call_site, fill_meta
from fxdeploy.settings import Settings

logger = logging.getLogger(__name__)
aten = torch.ops.aten
Node = torch.fx.Node

_FILLS = {aten.new_full.default: 2, aten.full.default: 1, aten.new_zeros.default: None, aten.zeros.default: None}
"""Buffer makers and the position of their fill value (None: zero)."""
_VIEW_OPS = frozenset({aten.select.int, aten.squeeze.dim, aten.slice.Tensor})


class _Plan(NamedTuple):
    buffer: Node
    chain: list[Node]  # the views from the buffer to the copy's destination, buffer first
    cuts: dict[int, int]  # buffer dims the copy covers only in part, and where it stops
    removed: list[int]  # buffer dims the chain selected or squeezed away
    fill: Any


def padded_copies(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.copy_.default:
            continue
        plan = _plan(node, {n: i for i, n in enumerate(gm.graph.nodes)})
        if isinstance(plan, str):
            logger.debug("padded_copies: %s stays in place: %s", call_site(node), plan)
            continue
        before = set(gm.graph.nodes)
        with gm.graph.inserting_before(node.next):  # in creation order, after the copy
            value = _padded(gm.graph, node.args[1], plan)
        fill_meta([n for n in gm.graph.nodes if n not in before])
        gm.graph.erase_node(node)
        for view in reversed(plan.chain):
            gm.graph.erase_node(view)
        plan.buffer.replace_all_uses_with(value)
        gm.graph.erase_node(plan.buffer)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def _plan(copy: Node, order: dict[Node, int]) -> _Plan | str:
    """How to spell ``copy`` as a pad, or why it cannot be."""
    if copy.users:
        return "the copy's result is read"
    chain: list[Node] = []
    view = copy.args[0]
    while isinstance(view, Node) and view.op == "call_function" and view.target in _VIEW_OPS:
        chain.append(view)
        view = view.args[0]
    buffer = view
    if not chain or not isinstance(buffer, Node) or buffer.target not in _FILLS:
        return "its destination is not a select/squeeze/slice view of a new_full, full, new_zeros or zeros buffer"
    fill = _fill(buffer)
    if fill is None:
        return f"the buffer's fill is not a constant ({buffer.format_node()})"
    chain.reverse()
    if any(len(v.users) != 1 for v in chain):
        return "a view on the way to the destination has other readers"
    if set(buffer.users) - {chain[0]} - _after(copy, buffer, order):
        return "the buffer is read or written before the copy"
    region = _region(buffer, chain)
    if isinstance(region, str):
        return region
    source = copy.args[1].meta.get("val") if isinstance(copy.args[1], Node) else None
    target = copy.args[0].meta.get("val")
    if not isinstance(source, torch.Tensor) or not isinstance(target, torch.Tensor):
        return "the source or the destination is not a tensor with metadata"
    if tuple(source.shape) != tuple(target.shape):
        return f"the copy broadcasts {list(source.shape)} to {list(target.shape)}"
    return _Plan(buffer, chain, *region, fill)


def _after(copy: Node, buffer: Node, order: dict[Node, int]) -> set[Node]:
    return {user for user in buffer.users if order[user] > order[copy]}


def _fill(buffer: Node) -> Any:
    position = _FILLS[buffer.target]
    value = 0 if position is None else buffer.args[position] if len(buffer.args) > position else None
    return value if isinstance(value, int | float | bool) else None


def _region(buffer: Node, chain: list[Node]) -> tuple[dict[int, int], list[int]] | str:
    """The written corner: the buffer dims cut short and their ends, and the buffer dims the chain
    squeezed or selected away; or why the region is not a corner."""
    shape = list(buffer.meta["val"].shape)
    dims = list(range(len(shape)))  # the buffer dim behind each dim of the current view
    cuts: dict[int, int] = {}
    removed: list[int] = []
    for view in chain:
        if len(view.args) < 2 or not isinstance(view.args[1], int):
            return f"{view.format_node()} has no constant dim"
        dim = dims[view.args[1] % len(dims)]
        size = shape[dim]
        if view.target in (aten.select.int, aten.squeeze.dim):
            if not (isinstance(size, int) and size == 1):
                return f"{view.format_node()} picks one of {size} rows, not the whole dim"
            dims.remove(dim)
            removed.append(dim)
            continue
        start, end, step = (*view.args[2:], *(None, None, 1)[len(view.args) - 2:])
        if start not in (None, 0) or step != 1 or not (end is None or isinstance(end, int)):
            return f"{view.format_node()} does not start at 0 with step 1 and a constant end"
        if end is None or end >= 2**62 or (isinstance(size, int) and end >= size):
            continue  # the whole dim
        if not isinstance(size, int):
            return f"{view.format_node()} cuts a dynamic dim"
        cuts[dim] = min(end, cuts.get(dim, end))
    return cuts, removed


def _padded(graph: torch.fx.Graph, source: Node, plan: _Plan) -> Node:
    value = source
    for dim in sorted(plan.removed):
        value = graph.call_function(aten.unsqueeze.default, (value, dim))
    buffer = plan.buffer.meta["val"]
    if source.meta["val"].dtype != buffer.dtype:
        value = graph.call_function(aten._to_copy.default, (value,), {"dtype": buffer.dtype})
    if plan.cuts:  # padded on the right, from the last dim back to the first cut one
        pads: list[int] = []
        for dim in range(buffer.dim() - 1, min(plan.cuts) - 1, -1):
            pads += [0, buffer.shape[dim] - plan.cuts[dim] if dim in plan.cuts else 0]
        value = graph.call_function(aten.constant_pad_nd.default, (value, pads, plan.fill))
    return value
