"""Spell a write into a buffer of one fill value as a pad of what is written.

torchvision's ``GeneralizedRCNNTransform.batch_images`` batches images this way:

    batched = images[0].new_full(batch_shape, 0)
    batched[i, :c, :h, :w].copy_(image)

Functionalized (``capture/functional.py``), the copy is a chain of scatters back into the buffer,
innermost view first: ``slice_scatter(batched[i, :c], image, 2, 0, w)``, then into ``batched[i]``
along dim 1, then ``select_scatter(batched, ..., 0, i)``. pnnx has no ncnn layer for a scatter.
Where the base holds one value everywhere, a scatter is its source padded with that value, which
ncnn's Padding layer runs:

    slice_scatter(full(v), src, d, a, b)   constant_pad_nd(src, [..., a, size - b, ...], v)
    select_scatter(full(v), src, d, i)     constant_pad_nd(src.unsqueeze(d), [..., i, size - i - 1, ...], v)

Each pad takes the next scatter's base with it, so the chain ends as pads of the image, and the
buffer is unused. A base holds one value where it is made by ``full``, ``zeros``, ``ones`` and
their ``new_``/``_like`` forms or by ``fill`` with a constant, through views of that (a view of a
fill is a fill), or where it is a tensor constant whose elements are bitwise equal (what
``fold_constants`` makes of a small buffer). Where the scatter dim is dynamic and the write stops
short of its end, the pad is unknown: ``scatters_as_slices`` spells it with slices and a cat.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import attribute, call_site, fill_meta
from fxdeploy.passes.scatters_as_slices import SCATTERS, Span, scatter_span
from fxdeploy.settings import Settings

logger = logging.getLogger(__name__)
aten = torch.ops.aten
Node = torch.fx.Node

_MAKERS = {
    aten.full.default: 1, aten.new_full.default: 2, aten.full_like.default: 1, aten.fill.Scalar: 1,
    aten.fill.Tensor: 1, aten.scalar_tensor.default: 0,
}
"""Ops that make a tensor of one value, and the position of that value."""
_ZEROS = {aten.zeros.default: 0, aten.new_zeros.default: 0, aten.zeros_like.default: 0, aten.ones.default: 1,
          aten.new_ones.default: 1, aten.ones_like.default: 1}
_VIEWS = frozenset({
    aten.select.int, aten.slice.Tensor, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default,
    aten.unsqueeze.default, aten.expand.default, aten.view.default, aten.reshape.default, aten._unsafe_view.default,
    aten.permute.default, aten.transpose.int, aten.t.default, aten.alias.default, aten.clone.default,
    aten.detach.default, aten.lift_fresh_copy.default, aten.narrow.default,
})
"""Ops whose result holds only values of their first argument, the same dtype."""


def padded_copies(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in SCATTERS:
            continue
        plan = _plan(gm, node)
        if isinstance(plan, str):
            logger.debug("padded_copies: %s stays a %s: %s", call_site(node), node.target, plan)
            continue
        span, pads, fill = plan
        before = set(gm.graph.nodes)
        with gm.graph.inserting_before(node):
            value = _padded(gm.graph, node, span, pads, fill)
        fill_meta([n for n in gm.graph.nodes if n not in before])
        node.replace_all_uses_with(value)
        gm.graph.erase_node(node)
        modified = True
    if modified:
        gm.graph.eliminate_dead_code()  # the buffer and its views
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def _plan(gm: torch.fx.GraphModule, node: Node) -> tuple[Span, tuple[int, int], Any] | str:
    """Where the scatter writes, how much fill goes before and after it, and the fill value; or
    why it is not a pad."""
    fill = fill_value(gm, node.args[0])
    if fill is None:
        return "its base is not a buffer of one fill value"
    span = scatter_span(node)
    if isinstance(span, str):
        return span
    size = node.args[0].meta["val"].shape[span.dim]
    if span.start < 0 or (span.end is not None and not isinstance(size, int)):
        return f"it writes {span.start}:{span.end} of a dynamic dim, where the pad on either side is not known"
    dtype = node.args[0].meta["val"].dtype
    try:  # the value as the buffer holds it (an int buffer made with full(..., 2.7) holds 2)
        fill = torch.full((), fill, dtype=dtype).item()
    except (RuntimeError, TypeError) as exc:
        return f"its fill {fill!r} does not convert to {dtype}: {exc}"
    return span, (span.start, 0 if span.end is None else size - span.end), fill


def fill_value(gm: torch.fx.GraphModule, node: Any) -> Any:
    """The one value every element of ``node`` holds (a Python number), or None if not known."""
    while isinstance(node, Node) and node.op == "call_function" and node.target in _VIEWS:
        node = node.args[0]
    if not isinstance(node, Node):
        return None
    if node.op == "get_attr":
        return _uniform(attribute(gm, node))
    if node.op != "call_function":
        return None
    if node.target in _ZEROS:
        return _ZEROS[node.target]
    position = _MAKERS.get(node.target)
    value = node.args[position] if position is not None and len(node.args) > position else None
    if isinstance(value, Node) and isinstance(value.meta.get("val"), torch.Tensor):
        return fill_value(gm, value)  # fill.Tensor: a constant 0-d tensor, lifted by export
    return value if isinstance(value, int | float | bool) else None


def _uniform(value: Any) -> Any:
    """The value of a tensor constant whose elements are all the same bits; None otherwise."""
    if not isinstance(value, torch.Tensor) or value.numel() == 0 or value.is_complex():
        return None
    flat = value.detach().reshape(-1)
    bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(flat.element_size())
    if bits is None or flat.dtype == torch.bool:
        return flat[0].item() if bool((flat == flat[0]).all()) else None
    as_bits = flat.view(bits)
    return flat[0].item() if bool((as_bits == as_bits[0]).all()) else None


def _padded(graph: torch.fx.Graph, node: Node, span: Span, pads: tuple[int, int], fill: Any) -> Node:
    base, src = node.args[0].meta["val"], node.args[1]
    value = src
    if src.meta["val"].dtype != base.dtype:  # a scatter casts its source to the base's dtype
        value = graph.call_function(aten._to_copy.default, (value,), {"dtype": base.dtype})
    if span.select:
        value = graph.call_function(aten.unsqueeze.default, (value, span.dim))
    if not any(pads):
        return value
    after_dim = [0, 0] * (base.dim() - 1 - span.dim)  # constant_pad_nd lists the last dim first
    return graph.call_function(aten.constant_pad_nd.default, (value, [*after_dim, *pads], fill))

