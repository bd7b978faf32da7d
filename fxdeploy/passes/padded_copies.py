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

from typing import Any

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import fill_meta
from fxdeploy.settings import Settings

aten = torch.ops.aten
Node = torch.fx.Node

_FILLS = {aten.new_full.default: 2, aten.full.default: 1, aten.new_zeros.default: None, aten.zeros.default: None}
"""Buffer makers and the position of their fill value (None: zero)."""
_VIEW_OPS = frozenset({aten.select.int, aten.squeeze.dim, aten.slice.Tensor})


def padded_copies(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    order = {node: i for i, node in enumerate(gm.graph.nodes)}
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.copy_.default or node.users:
            continue
        plan = _plan(node, order)
        if plan is None:
            continue
        buffer, chain, cuts, removed, fill = plan
        before = set(gm.graph.nodes)
        with gm.graph.inserting_before(node.next):  # in creation order, after the copy
            value = _padded(gm.graph, node.args[1], buffer, cuts, removed, fill)
        fill_meta([n for n in gm.graph.nodes if n not in before])
        gm.graph.erase_node(node)
        for view in reversed(chain):
            gm.graph.erase_node(view)
        buffer.replace_all_uses_with(value)
        gm.graph.erase_node(buffer)
        modified = True
    if modified:
        gm.graph.lint()
        gm.recompile()
    return PassResult(gm, modified)


def _plan(copy: Node, order: dict[Node, int]) -> tuple[Node, list[Node], dict[int, int], list[int], Any] | None:
    """(buffer, view chain, the cut buffer dims and their ends, dims the chain removed, fill) or None."""
    chain: list[Node] = []
    view = copy.args[0]
    while isinstance(view, Node) and view.op == "call_function" and view.target in _VIEW_OPS:
        chain.append(view)
        view = view.args[0]
    buffer = view
    if not chain or not isinstance(buffer, Node) or buffer.target not in _FILLS:
        return None
    fill = _fill(buffer)
    if fill is None or copy.kwargs.get("non_blocking"):
        return None
    chain.reverse()  # buffer first
    if any(len(v.users) != 1 for v in chain) or set(buffer.users) - {chain[0]} - _after(copy, buffer, order):
        return None
    region = _region(buffer, chain)
    source = copy.args[1].meta.get("val") if isinstance(copy.args[1], Node) else None
    target = copy.args[0].meta.get("val")
    if region is None or not isinstance(source, torch.Tensor) or not isinstance(target, torch.Tensor):
        return None
    if tuple(source.shape) != tuple(target.shape):
        return None  # a broadcasting copy
    cuts, removed = region
    return buffer, chain, cuts, removed, fill


def _after(copy: Node, buffer: Node, order: dict[Node, int]) -> set[Node]:
    return {user for user in buffer.users if order[user] > order[copy]}


def _fill(buffer: Node) -> Any:
    position = _FILLS[buffer.target]
    value = 0 if position is None else buffer.args[position] if len(buffer.args) > position else None
    return value if isinstance(value, int | float | bool) else None


def _region(buffer: Node, chain: list[Node]) -> tuple[dict[int, int], list[int]] | None:
    """The written corner: the buffer dims cut short and their ends, and the buffer dims the chain
    squeezed or selected away. None where the region is not a corner."""
    shape = list(buffer.meta["val"].shape)
    dims = list(range(len(shape)))  # the buffer dim behind each dim of the current view
    cuts: dict[int, int] = {}
    removed: list[int] = []
    for view in chain:
        if len(view.args) < 2 or not isinstance(view.args[1], int):
            return None
        dim = dims[view.args[1] % len(dims)]
        size = shape[dim]
        if view.target in (aten.select.int, aten.squeeze.dim):
            if not (isinstance(size, int) and size == 1):
                return None  # a select of one row among several is not a corner
            if view.target is aten.select.int and view.args[2] not in (0, -1):
                return None
            dims.remove(dim)
            removed.append(dim)
            continue
        start, end, step = (*view.args[2:], *(None, None, 1)[len(view.args) - 2:])
        if start not in (None, 0) or step != 1 or not (end is None or isinstance(end, int)):
            return None
        if end is None or end >= 2**62 or (isinstance(size, int) and end >= size):
            continue  # the whole dim
        if not isinstance(size, int):
            return None  # a cut of a dynamic dim
        cuts[dim] = min(end, cuts.get(dim, end))
    return cuts, removed


def _padded(graph: torch.fx.Graph, source: Node, buffer: Node, cuts: dict[int, int], removed: list[int],
            fill: Any) -> Node:
    value = source
    for dim in sorted(removed):
        value = graph.call_function(aten.unsqueeze.default, (value, dim))
    buffer_value = buffer.meta["val"]
    if source.meta["val"].dtype != buffer_value.dtype:
        value = graph.call_function(aten._to_copy.default, (value,), {"dtype": buffer_value.dtype})
    if cuts:  # padded on the right, from the last dim back to the first cut one
        pads: list[int] = []
        for dim in range(buffer_value.dim() - 1, min(cuts) - 1, -1):
            pads += [0, buffer_value.shape[dim] - cuts[dim] if dim in cuts else 0]
        value = graph.call_function(aten.constant_pad_nd.default, (value, pads, fill))
    return value
