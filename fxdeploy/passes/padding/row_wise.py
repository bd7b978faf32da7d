"""Every other op that reads padded rows or their count: row-wise work on padded rows (arithmetic,
column slices, gathers by kept indices) changes nothing on the valid ones, and a count used as a
shape (``reshape(x, [n, 4])``, ``arange(n)``) becomes its bound. A view that keeps the rows dim
and splits or merges only the others is row-wise too, also where the capture fixed the rows at the
example's count (``pred[:, 6:].view(len(pred), 17, 3)`` captured with real values holds a literal
there, with the assert that it equals the count): its rows dim takes the bound, as eager's takes
the count. What the padding would change is refused with the call site: a view that merges or
splits the rows dim, an op that holds fewer dims of the selected rows than it reads (a sort or
reduction over them that ``reductions`` does not mask), their count as a value, or a slice of them
that starts from their end (``x[-k:]``).
"""

from __future__ import annotations

import operator
from collections import Counter

import sympy
import torch
from torch._guards import detect_fake_mode
from torch.fx.experimental.symbolic_shapes import statically_known_true

from fxdeploy.passes.graph_utils import call_site, fill_meta, is_op, size_symbols
from fxdeploy.passes.padding.rows import PaddedRows
from fxdeploy.passes.padding.rule import CompactionError, Rule

aten = torch.ops.aten
Node = torch.fx.Node
# Ops whose SymInt arguments are shapes: a padded size there becomes its bound.
SHAPES = {aten.view, aten.reshape, aten._unsafe_view, aten.expand, aten.zeros, aten.ones, aten.full, aten.empty,
          aten.new_zeros, aten.new_ones, aten.new_full, aten.new_empty, aten.arange, aten.slice, aten.narrow}
# Views: a view of selected rows keeps their dim, or is refused.
VIEWS = {aten.view, aten.reshape, aten._unsafe_view}
# Ops that pick rows by an index: the index's dims stand for the rows dim it indexes.
_INDEXING = {"aten.index.Tensor", "aten.index_select.default", "aten.gather.default"}
# Ops that move values along a dim while keeping its length: the padding would move into the valid
# rows. (A running sum or product reads only the rows before it, and the valid rows come first: it
# is row-wise. A softmax is ``reductions``'.)
ALONG = {aten.sort, aten.argsort, aten.flip, aten.roll}


def _check(node: Node, rows: PaddedRows) -> str | None:
    if node.op != "call_function" or isinstance(node.meta.get("val"), torch.SymInt):
        return "not an op on tensors"
    if not any(rows.dims(a) or rows.size(a.meta.get("val")) is not None for a in node.all_input_nodes):
        return "reads no selected rows and no count of them"
    return None


def _replace(gm: torch.fx.GraphModule, node: Node, rows: PaddedRows) -> None:
    _refuse_from_the_end(node, rows)
    _name_slice(gm.graph, node, rows)
    if not str(node.target).startswith("aten._assert"):
        node.args, node.kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda a: _bound(node, a, rows))
    if getattr(node.target, "overloadpacket", None) in VIEWS:
        _keep_rows(node, rows)
    _refuse_mixing(node, rows)


def _refuse_from_the_end(node: Node, rows: PaddedRows) -> None:
    """A slice of padded rows that starts from their end (``x[-k:]``) or at their count (``x[n - k:]``)
    would start in the padding, which sits at the end: only a start from the first row is kept. An
    ``arange`` that starts at the count or steps down (``arange(n - 1, -1, -1)``) would index it."""
    if is_op(node, "aten.arange.start", "aten.arange.start_step"):
        start, step = node.args[0], node.args[2] if len(node.args) > 2 else node.kwargs.get("step", 1)
        counted = [a for a in node.args[:2] if isinstance(a, Node) and rows.size(a.meta.get("val")) is not None]
        if counted and (start in counted or not (isinstance(step, int) and step > 0)):
            raise CompactionError(
                f"{call_site(node)}: an arange from {start} by {step} counts from the end of the rows selected at "
                f"{rows.site_of(rows.size(counted[0].meta['val']))}; the padded rows sit at the end. Count up from "
                "a fixed start"
            )
        return
    if not is_op(node, "aten.slice.Tensor", "aten.narrow.default"):
        return
    args = list(node.args) + [None] * (3 - len(node.args))
    dim, start = args[1] if args[1] is not None else 0, args[2] if args[2] is not None else 0
    if dim % max(node.args[0].meta["val"].dim(), 1) in rows.dims(node.args[0]) and not (
        isinstance(start, int) and start >= 0
    ):
        raise CompactionError(
            f"{call_site(node)}: slices the rows selected at {rows.site(node.args[0])} from {start}, counted from "
            "their end or their number; the padded rows sit at the end. Slice from the first row ([:k]), or take "
            "the rows with topk"
        )


def _name_slice(graph: torch.fx.Graph, node: Node, rows: PaddedRows) -> None:
    """``x[start:stop]`` of padded rows keeps the valid ones first: ``clamp(count - start, 0, stop -
    start)`` of them (``count + stop - start`` for a stop counted from the end). torch 2.13 writes its
    size as such an expression of the rows' symbol (``Min(300, u5)``); torch 2.11 names it by a new
    symbol of its own (``u6``, asserted ``<= u5``), which gets that bound and count here, so that
    what reads the slice is padded too."""
    if not is_op(node, "aten.slice.Tensor", "aten.narrow.default"):
        return
    source = node.args[0].meta["val"]
    args = list(node.args) + [None] * (5 - len(node.args))
    dim = (args[1] or 0) % max(source.dim(), 1)
    if dim not in rows.dims_of(source):
        return
    if not size_symbols(node.meta["val"].shape[dim]):
        _restore_fixed(node, dim, rows)
    size = node.meta["val"].shape[dim]
    if rows.size(size) is not None or not size_symbols(size):
        return
    expr = rows.size(source.shape[dim])
    bound, start = rows.bound(expr), args[2] or 0
    stop, step = (start + args[3], 1) if is_op(node, "aten.narrow.default") else (args[3], args[4] or 1)
    stop = bound if stop is None else stop
    if not (isinstance(start, int) and isinstance(stop, int) and step == 1):
        raise CompactionError(
            f"{call_site(node)}: slices the rows selected at {rows.site(node.args[0])} as [{start}:{stop}:{step}], "
            "whose valid rows are not a count that fxdeploy can spell. Slice from a fixed start to a fixed stop (x[:k])"
        )
    # eager keeps rows [start, min(count, stop)) or, for a stop counted from the end, [start, count + stop)
    width, count = max((min(stop, bound) if stop >= 0 else bound + stop) - start, 0), rows.count(expr)
    drop = start if stop >= 0 else start - stop
    if isinstance(count, int):
        kept: Node | int = min(max(count - drop, 0), width)
    else:
        kept = graph.call_function(aten.clamp.default, (graph.call_function(aten.sub.Tensor, (count, drop)), 0, width))
    rows.add(size.node.expr, width, kept, rows.site(node.args[0]))


def _restore_fixed(node: Node, dim: int, rows: PaddedRows) -> None:
    """A slice of padded rows whose size the capture fixed at the example's (torch 2.11 does so for
    ``nms(...)[:45]`` read by ``len()``, where torch 2.13 fixes only the view that reads it) is
    computed again from its padded input, so that it and what reads it follow the count. Where that
    gives a number again, torch read it from a branch the example took (``if n > max_nms: x =
    x[:max_nms]`` records ``u0 > 30000``, so ``Min(30000, u0)`` is 30000); the padded rows hold any
    count, so the slice's size is named anew (``_name_slice`` counts it: all k where the rows hold k)."""
    fill_meta([node], fresh_sizes=True)
    value = node.meta["val"]
    if not size_symbols(value.shape[dim]):
        mode = detect_fake_mode([value])
        with mode, mode.shape_env.ignore_fresh_unbacked_symbols():
            size = mode.shape_env.create_unbacked_symint()
            torch._check(size >= 0)
            torch._check(size <= value.shape[dim])
            node.meta["val"] = value.new_empty([size if d == dim else s for d, s in enumerate(value.shape)])
    rows.restored.add(node)


def _keep_rows(node: Node, rows: PaddedRows) -> None:
    """A view of padded rows keeps the valid rows first where the dims before the rows dim stay as
    they are: the rows dim is then kept, or merged or split with the dims after it only. Where the
    view's value lost the rows dim (fixed at the example's count by the capture), it is restored at
    its bound. Any other view mixes the padding in, and is refused."""
    source, value = node.args[0].meta["val"], node.meta["val"]
    padded, shape = rows.dims_of(source), list(value.shape)
    if not padded or (len(padded) > 1 and tuple(shape) == tuple(source.shape)):
        if node.args[0] in rows.restored:  # the loop leaves a view of a restored value to this rule
            fill_meta([node])
            rows.restored.add(node)
        return
    kept = _rows_dim(list(source.shape), padded, shape, rows.dims_of(value))
    if kept is None:
        raise CompactionError(
            f"{call_site(node)}: {node.target} of the rows selected at {rows.site(node.args[0])} "
            f"({tuple(source.shape)} to {tuple(shape)}) does not keep their dim whole: it merges or splits it "
            "with the dims before it, and the padded rows would enter the others. Keep the rows dim first "
            "(view(-1, ...) or view(len(x), ...)) and reshape only the dims after it"
        )
    if rows.dims_of(value):
        return
    sizes = list(node.args[1])
    sizes[kept] = rows.bound(rows.size(source.shape[padded[0]]))
    node.args = (node.args[0], sizes, *node.args[2:])
    shape[kept] = source.shape[padded[0]]
    node.meta["val"] = source.reshape(shape)  # the padded rows' symbol, for the rules after it
    rows.restored.add(node)


def _rows_dim(source: list, padded: list[int], shape: list, out_padded: list[int]) -> int | None:
    """The view dim that holds the one padded dim of ``source``, the dims before it unchanged;
    None where there is none, or more than one it could be (unit dims around a count fixed at 1)."""
    if len(padded) != 1 or len(out_padded) > 1:
        return None
    dim = padded[0]
    if out_padded:
        return out_padded[0] if _product(shape[:out_padded[0]]) == _product(source[:dim]) else None
    kept = [k for k in range(len(shape)) if _product(shape[:k]) == _product(source[:dim])
            and _product(shape[k + 1:]) == _product(source[dim + 1:])]
    return kept[0] if len(kept) == 1 else None


def _product(sizes: list) -> sympy.Expr:
    return sympy.Mul(*[s.node.expr if isinstance(s, torch.SymInt) else sympy.Integer(s) for s in sizes])


def _bound(node: Node, arg: Node, rows: PaddedRows) -> object:
    """A padded size used as a shape becomes its bound; used as a value, it is refused."""
    expr = rows.size(arg.meta.get("val"))
    if expr is None:
        return arg
    if is_op(node, "aten.split_with_sizes.default") and len(node.args[1]) == 1:
        return rows.bound(expr)  # one piece: all the rows (torchvision's per-image split)
    if getattr(node.target, "overloadpacket", None) not in SHAPES:
        raise CompactionError(
            f"{call_site(node)}: the number of rows selected at {rows.site_of(expr)} is used as a value by "
            f"{node.target}; a static engine holds the rows at their bound, so the count is not known when the "
            "graph is built. Use the rows themselves (a mask, or padding) rather than their count"
        )
    return rows.bound(expr)


def _refuse_mixing(node: Node, rows: PaddedRows) -> None:
    """An op reading padded rows must keep them apart: a row-wise op, or a gather of some rows."""
    read = [a for a in node.all_input_nodes if rows.dims(a)]
    if not read or node.target is operator.getitem or _gathers_rows(node, rows):
        return
    source = node.args[0]
    along = _along(node)
    if along and any(dim % max(source.meta["val"].dim(), 1) in rows.dims(source) for dim in along):
        raise CompactionError(
            f"{call_site(node)}: {node.target} orders or moves values along the rows selected at "
            f"{rows.site(source)}, and the padded rows would enter it. Keep the rows apart until an NMS, "
            "or select with a fixed count (topk)"
        )
    value = node.meta.get("val")
    values = value if isinstance(value, (list, tuple)) else [value]
    outputs = [v for v in values if isinstance(v, torch.Tensor)]
    if str(node.target) in _INDEXING:  # rows picked by an index: the index's dims stand for the ones it picks
        lost = [] if any(rows.dims_of(v) for v in outputs) else [rows.site(read[0])]
    else:
        (need, most_read), (have, most_held) = _padded_dims([[a.meta["val"] for a in read], outputs], rows)
        fewer = most_held < most_read or (have.keys() <= need.keys() and any(have[e] < need[e] for e in need))
        lost = [rows.site(read[0])] if fewer else []
    if lost:
        raise CompactionError(
            f"{call_site(node)}: {node.target} combines the rows selected at {lost[0]} (a reduction, product or "
            "reshape across them), and the padded rows would enter it. Keep the rows apart until an NMS, or select "
            "with a fixed count (topk)"
        )


def _padded_dims(groups: list[list[torch.Tensor]], rows: PaddedRows) -> list[tuple[Counter, int]]:
    """For each group of values: the most dims one value holds of each padded size, and of all. An op
    that keeps the rows apart holds as many padded dims as any input ([n] + [n] is [n], [n, 1] *
    [1, n] is [n, n], a slice [:k] of [n] is [min(k, n)]); one that holds fewer (``w @ b`` of
    [k, n] and [n, 4], ``iou.sum(1)`` of [n, n]), or that names no new size and holds fewer of one
    (``searchsorted`` of [k] values in [n] rows), combined rows across a padded dim. Two sizes
    torch proved equal (pieces of a cat side by side) are one."""
    seen: list[torch.SymInt] = []

    def canonical(size: torch.SymInt) -> object:
        same = next((s for s in seen if statically_known_true(s == size)), None)
        if same is None:
            seen.append(size)
        return rows.size(same if same is not None else size)

    counted = []
    for group in groups:
        held = [Counter(canonical(size) for size in value.shape if rows.size(size) is not None) for value in group]
        most: Counter = Counter()
        for each in held:
            most |= each  # the most of each size that one value holds
        counted.append((most, max((each.total() for each in held), default=0)))
    return counted


def _gathers_rows(node: Node, rows: PaddedRows) -> bool:
    """``rows[index]`` by an index of a size of its own (an NMS's kept indices)."""
    if not is_op(node, "aten.index.Tensor", "aten.index_select.default"):
        return False
    index = node.args[1][0] if is_op(node, "aten.index.Tensor") else node.args[2]
    return isinstance(index, Node) and not rows.dims(index)


def _along(node: Node) -> list[int]:
    """The dims an ``ALONG`` op moves values along: a sort's ``dim``, a flip's ``dims``, a roll's
    ``dims`` (none: the flattened tensor, so every dim)."""
    packet = getattr(node.target, "overloadpacket", None)
    if packet not in ALONG:
        return []
    if packet is aten.roll:
        dims = node.args[2] if len(node.args) > 2 else node.kwargs.get("dims", [])
        return list(dims) if dims else list(range(node.args[0].meta["val"].dim()))
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dims" if packet is aten.flip else "dim", -1)
    return [dims] if isinstance(dims, int) else list(dims)


ROW_WISE = Rule("row_wise", _check, _replace)
