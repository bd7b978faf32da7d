"""Spell functional writes as slices and a ``cat``, for ncnn and for the ONNX targets (and its
``slice_scatter`` rule alone for every target's vectorized graph: ``slice_scatters_as_cats``).

pnnx cannot convert the writes at all, and ncnn runs the spelling. torch.onnx converts them, but as
a ScatterElements (``select_scatter``) or a ScatterND between Transposes (``slice_scatter``) with an
index tensor as large as what is written: torchvision's image batching (the copy of each image
into its zero buffer) took 8.5 ms an image on ONNX Runtime at 320 px, where the spelling is an
Unsqueeze. So the ONNX targets' pipelines run it too.

A captured graph that writes is functionalized before the passes (``capture/functional.py``):
``y[:, 1] = v`` becomes ``select_scatter(y, copy(y[:, 1], v), 1, 1)``, ``y[:, 2:4] *= 3`` a
``slice_scatter`` and ``y[:, 0] = 0`` a ``fill``. pnnx writes them as ``aten::select_scatter``,
``aten::copy``..., layers ncnn does not have. Each has an exact spelling in ops that it converts:

    copy(dst, src)                      src cast to dst's dtype, expanded to dst's shape
    fill(dst, v)                        v cast to dst's dtype, expanded to dst's shape
    slice_scatter(base, src, d, a, b)   cat([base[:a], src, base[b:]], d)            (step 1)
    select_scatter(base, src, d, i)     cat([base[:i], src.unsqueeze(d), base[i+1:]], d)

with the empty pieces left out (``src`` alone where it covers the whole dim). A slice of a ``cat``
along its dim takes the pieces it covers, so a buffer written piece by piece (Ultralytics'
``xywh2xyxy`` into an ``empty_like``) ends as one ``cat`` of the pieces, and the buffer goes.
Left as it is, with the reason logged: a step other than 1, a start, end or index that is not a
constant, and a negative index or an end short of the end of a dim whose size is dynamic.
``padded_copies`` runs first: a write into a buffer of one fill value is better a pad.

A ``cat`` or an ``expand`` does not keep the strides the scatter kept (its base's), so a ``view``
downstream of one may no longer apply (a ``view`` of the transpose of a ``cat``): those views
become ``reshape``, which gives the same values in a functional graph and copies where it must.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, NamedTuple

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import call_site, fill_meta
from fxdeploy.settings import Settings

logger = logging.getLogger(__name__)
aten = torch.ops.aten
Node = torch.fx.Node
Graph = torch.fx.Graph

SCATTERS = (aten.slice_scatter.default, aten.select_scatter.default)
_COPIES = (aten.copy.default, aten.fill.Scalar, aten.fill.Tensor)
_TO_THE_END = 2**62
"""An end at or past this is torch's ``sys.maxsize`` for ``x[a:]``."""


class Span(NamedTuple):
    """Where a scatter writes: along ``dim``, from ``start`` to ``end`` (None: to the dim's end);
    on a dim of static size both are in range, on a dynamic one they may count from its end."""

    dim: int
    start: int
    end: int | None
    select: bool  # a select_scatter: the source lacks ``dim``


def scatters_as_slices(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    return PassResult(gm, rewrite(gm, (*SCATTERS, *_COPIES)))  # run_pipeline lints and recompiles


def slice_scatters_as_cats(gm: torch.fx.GraphModule) -> bool:
    """The ``slice_scatter`` rule alone, for ``fxdeploy.capture.vectorize`` on every target: vmap
    writes a batched head's ``x[..., :4] = boxes`` as one over the whole batch (on ONNX Runtime a
    ScatterND between 3-D Transposes, 80 ms of a 220 ms YOLO11n call at batch 8). Recompiles."""
    modified = rewrite(gm, (aten.slice_scatter.default,))
    if modified:
        gm.recompile()
    return modified


def rewrite(gm: torch.fx.GraphModule, targets: tuple[Any, ...]) -> bool:
    """Spell each write whose op is in ``targets`` as the module's doc says, where it can be."""
    modified = False
    rewritten: list[Node] = []
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in targets:
            continue
        span = scatter_span(node) if node.target in SCATTERS else None
        if isinstance(span, str):
            logger.debug("scatters_as_slices: %s stays a %s: %s", call_site(node), node.target, span)
            continue
        before = set(gm.graph.nodes)
        with gm.graph.inserting_before(node):
            value = _copied(gm.graph, node) if span is None else _joined(gm.graph, node, span)
        inserted = [n for n in gm.graph.nodes if n not in before]
        for new in inserted:  # the write's stack trace and module path, so an error names its line
            new.meta.update({k: v for k, v in node.meta.items() if k not in ("val", "tensor_meta")})
        fill_meta(inserted)
        node.replace_all_uses_with(value)
        gm.graph.erase_node(node)
        rewritten.append(value)
        modified = True
    if modified:
        _views_as_reshapes(rewritten)
        gm.graph.eliminate_dead_code()  # the slices of a buffer that was written all over
    return modified


def _views_as_reshapes(rewritten: list[Node]) -> None:
    """Each ``view`` downstream of a rewritten value becomes a ``reshape`` (see the module's doc)."""
    seen, todo = set(), list(rewritten)
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        if node.op == "call_function" and node.target is aten.view.default:
            node.target = aten.reshape.default
        todo.extend(node.users)


def scatter_span(node: Node) -> Span | str:
    """Where a slice_scatter or select_scatter writes, or why that is not known from the graph."""
    args = _arguments(node)
    base, src = node.args[0].meta["val"], node.args[1].meta["val"]
    if base.dim() == 0 or not isinstance(args["dim"], int):
        return "its dim is not a constant"
    dim = args["dim"] % base.dim()
    size = base.shape[dim]
    static = isinstance(size, int)
    if node.target is aten.select_scatter.default:
        index = args["index"]
        if not isinstance(index, int):
            return f"its index {index} is not a constant"
        index = index % size if static else index  # from the end of a dynamic dim: -1 is its last row
        last = index == -1 or (static and index + 1 == size)  # (no comparison of a dynamic size: a guard)
        return _kept_whole(Span(dim, index, None if last else index + 1, True), base, size)
    start, end, step = args.get("start"), args.get("end"), args.get("step", 1)
    start = 0 if start is None else start
    end = _TO_THE_END if end is None else end
    if step != 1:
        return f"it writes every {step}th row (step {step}), which no slice-and-cat spells"
    if not isinstance(start, int) or not isinstance(end, int):
        return f"its start {start} or end {end} is not a constant"
    if static:
        start = min(max(start + size if start < 0 else start, 0), size)
        end = min(max(end + size if end < 0 else end, start), size)
        return Span(dim, start, None if end == size else end, False)
    if end >= _TO_THE_END:
        return _kept_whole(Span(dim, start, None, False), base, size)
    written = src.shape[dim]  # a fixed count: start and end fall where slices of the base put them
    if not (isinstance(written, int) and written > 0):
        return f"it writes {start}:{end} of a dynamic dim, a count of rows not known here"
    return _kept_whole(Span(dim, start, end, False), base, size)


def _kept_whole(span: Span, base: torch.Tensor, size: int | torch.SymInt) -> Span | str:
    """``span``, unless the base is 1-D and a piece kept around the write may be empty at some size
    of its dynamic dim: torch's ``cat`` of 1-D pieces drops an empty one and reads the size to know
    (a guard), which fixes the dim at the example's size for every pass after this one."""
    if base.dim() != 1:
        return span
    before = span.start if span.start >= 0 else size + span.start
    after = 0 if span.end is None else (-span.end if span.end < 0 else size - span.end)
    for piece in (before, after):
        if not isinstance(piece, int) and not statically_known_true(piece >= 1):
            return f"a 1-D write on a dynamic dim whose rows beside it may be none ({piece} of them)"
    return span


def _arguments(node: Node) -> dict[str, Any]:
    """The call's arguments by name, the schema's defaults (``dim=0``, ``start=None``) included."""
    schema = node.target._schema.arguments
    defaults = {a.name: a.default_value for a in schema if a.has_default_value()}
    return {**defaults, **dict(zip([a.name for a in schema], node.args, strict=False)), **node.kwargs}


def _joined(graph: Graph, node: Node, span: Span) -> Node:
    base, src = node.args[0], node.args[1]
    written = _cast(graph, src, base.meta["val"].dtype)
    if span.select:
        written = graph.call_function(aten.unsqueeze.default, (written, span.dim))
    pieces = [written]
    if span.start != 0:
        pieces.insert(0, sliced(graph, base, span.dim, 0, span.start))
    if span.end is not None:
        pieces.append(sliced(graph, base, span.dim, span.end, None))
    return pieces[0] if len(pieces) == 1 else graph.call_function(aten.cat.default, (pieces, span.dim))


def sliced(graph: Graph, value: Node, dim: int, start: int, end: int | None) -> Node:
    """``value`` from ``start`` to ``end`` along ``dim``; of a ``cat`` along ``dim`` whose pieces
    have static sizes there, the pieces the range covers (a piece written in an earlier scatter)."""
    taken: list[Node] = []
    offset = 0
    for piece, size in _pieces(value, dim) if start >= 0 and (end is None or end >= 0) else ():
        low, high = max(start, offset), size + offset if end is None else min(end, size + offset)
        if low < high:
            whole = low == offset and high == offset + size
            taken.append(piece if whole else sliced(graph, piece, dim, low - offset, high - offset))
        offset += size
    if not taken:
        return graph.call_function(aten.slice.Tensor, (value, dim, start, sys.maxsize if end is None else end))
    return taken[0] if len(taken) == 1 else graph.call_function(aten.cat.default, (taken, dim))


def _pieces(value: Node, dim: int) -> list[tuple[Node, int]]:
    """The pieces of a ``cat`` along ``dim`` with their static sizes there; none otherwise."""
    if value.op != "call_function" or value.target is not aten.cat.default:
        return []
    cat_dim = value.args[1] if len(value.args) > 1 else value.kwargs.get("dim", 0)
    if cat_dim % value.meta["val"].dim() != dim:
        return []
    sizes = [piece.meta["val"].shape[dim] for piece in value.args[0]]
    if not all(isinstance(size, int) for size in sizes):
        return []
    return [(piece, size) for piece, size in zip(value.args[0], sizes, strict=True) if size > 0]


def _copied(graph: Graph, node: Node) -> Node:
    """A copy or fill: its source (or fill value), cast and expanded to the destination."""
    dst, source = node.args[0], node.args[1]
    want = dst.meta["val"]
    if not isinstance(source, Node) or not isinstance(source.meta.get("val"), torch.Tensor):  # fill.Scalar
        return graph.call_function(aten.full.default, (_shape(graph, dst), source),
                                   {"dtype": want.dtype, "device": want.device})
    value = _cast(graph, source, want.dtype)
    if tuple(source.meta["val"].shape) == tuple(want.shape):
        return value
    return graph.call_function(aten.expand.default, (value, _shape(graph, dst)))


def _cast(graph: Graph, value: Node, dtype: torch.dtype) -> Node:
    if value.meta["val"].dtype == dtype:
        return value
    return graph.call_function(aten._to_copy.default, (value,), {"dtype": dtype})


def _shape(graph: Graph, like: Node) -> list[int | Node]:
    """``like``'s shape, a dynamic size read from it with ``sym_size``."""
    shape = like.meta["val"].shape
    return [size if isinstance(size, int) else graph.call_function(aten.sym_size.int, (like, dim))
            for dim, size in enumerate(shape)]
