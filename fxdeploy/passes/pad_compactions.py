"""Mask, don't compact: a data-dependent selection keeps its static size, valid rows first.

Detection postprocessing filters rows by score, takes the top k of the survivors, concatenates
the levels of a feature pyramid, runs an NMS and keeps its first k results. Each step has a size
that depends on the data, which static engines cannot hold. This pass gives every such size a
static bound (the rows it was selected from) and a count, and keeps the valid rows first:

- ``x[mask]``, ``nonzero``, ``where(cond)`` and ``masked_select`` become a stable partition:
  the selected rows first, in their order, then the others;
- ``topk(x, min(n, k))`` over selected rows takes a static ``min(bound, k)`` from the rows with
  the padding at -inf (+inf for the smallest), so the valid results come first;
- ``cat`` of selected pieces partitions the concatenation by the pieces' valid rows;
- a size used as a shape (``reshape(x, [n, 4])``, ``arange(n)``) becomes its bound;
- ``index_put`` by selected indices writes the padded rows into a scratch row, then drops it;
- an NMS never takes a padded row: its scores are -inf there, and ``substitute_nms`` then makes
  the NMS and its ``keep[:k]`` static;
- a selected tensor returned as it is gets its count as a hidden output, for the host to trim.

Row-wise work on padded rows (arithmetic, column slices, gathers by selected indices) changes
nothing on the valid ones. The pass refuses, naming the call site, where the padded form cannot
equal eager: a reduction or sort over the selected rows, or their count used as a value.
"""

from __future__ import annotations

import operator

import sympy
import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import call_site, is_op, refresh_meta, unbacked_symbols
from fxdeploy.passes.padded_rows import PaddedRows, UnsupportedSize, data_symbols
from fxdeploy.passes.substitute_nms import NMS_OPS, multiclass_keep
from fxdeploy.passes.tensorize_outputs import HIDDEN, OUTPUT_NAMES, TRIM
from fxdeploy.settings import Settings

aten = torch.ops.aten
Node = torch.fx.Node
# Ops whose SymInt arguments are shapes: a padded size there becomes its bound.
_SHAPES = {aten.view, aten.reshape, aten._unsafe_view, aten.expand, aten.zeros, aten.ones, aten.full, aten.empty,
           aten.new_zeros, aten.new_ones, aten.new_full, aten.new_empty, aten.arange, aten.slice, aten.narrow}
# Ops that order or accumulate along a dim while keeping its length.
_ALONG = {aten.sort, aten.argsort, aten.cumsum, aten.cumprod, aten.flip, aten.roll, aten._softmax, aten._log_softmax,
          aten.softmax, aten.log_softmax}


class CompactionError(ValueError):
    """A data-dependent selection whose padded form would not equal eager; the message says where."""


def pad_compactions(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    rows = PaddedRows(gm.graph)
    for node in list(gm.graph.nodes):
        with gm.graph.inserting_before(node):
            try:
                _visit(gm, node, rows)
            except UnsupportedSize as exc:
                raise CompactionError(f"{call_site(node)}: {exc}; only sums, products, min and max are padded") from exc
    if not rows.bounds:
        return PassResult(gm, False)
    gm.graph.eliminate_dead_code()
    refresh_meta(gm)
    for node in gm.graph.nodes:
        if unbacked_symbols(node.meta.get("val")):
            raise CompactionError(
                f"{call_site(node)}: {node.target} still has a data-dependent size {tuple(node.meta['val'].shape)} "
                "after padding; compute it from a selection, topk, cat or NMS of static rows"
            )
    return PassResult(gm, True)


def _visit(gm: torch.fx.GraphModule, node: Node, rows: PaddedRows) -> None:
    if node.op == "output":
        _trim_outputs(gm, node, rows)
    elif is_op(node, "aten.index.Tensor") and _bool_index(node):
        _replace(node, _select(node, node.args[0], node.args[1][0], rows)[0])
    elif is_op(node, "aten.nonzero.default"):
        order = _select(node, None, node.args[0], rows)[0]
        _replace(node, gm.graph.call_function(aten.unsqueeze.default, (order, 1)))
    elif is_op(node, "aten.where.default"):
        _where(node, rows)
    elif is_op(node, "aten.masked_select.default"):
        _masked_select(gm, node, rows)
    elif is_op(node, "aten.topk.default"):
        _topk(gm, node, rows)
    elif is_op(node, "aten.cat.default"):
        _cat(gm, node, rows)
    elif is_op(node, "aten.index_put.default", "aten.index_put_.default"):
        _index_put(gm, node, rows)
    elif is_op(node, *NMS_OPS):
        _nms(gm, node, rows)
    else:
        _shapes(node, rows)
        _check(node, rows)


def _bool_index(node: Node) -> bool:
    indices = node.args[1]
    value = getattr(indices[0], "meta", {}).get("val") if len(indices) == 1 else None
    return isinstance(value, torch.Tensor) and value.dtype == torch.bool


def _select(node: Node, source: Node | None, mask: Node, rows: PaddedRows) -> tuple[Node, Node]:
    """Pad a selection of ``source``'s rows (of an arange when None) by a 1-D mask: register its
    size symbol and return (the padded rows, their order)."""
    value, selected = mask.meta["val"], node.meta["val"]
    selected = selected[0] if isinstance(selected, (list, tuple)) else selected
    symbol = selected.shape[0].node.expr if isinstance(selected.shape[0], torch.SymInt) else None
    if value.dim() != 1 or not isinstance(symbol, sympy.Symbol):
        raise CompactionError(f"{call_site(node)}: a boolean mask of rank {value.dim()}; only a 1-D row mask is padded")
    call = rows.graph.call_function
    bound = _static_rows(mask, rows)
    valid = mask
    for earlier in (mask, source):  # a filter of already-selected rows: the padding stays out
        expr = rows.rows(earlier) if earlier is not None else None
        if expr is not None:
            valid = call(aten.logical_and.default, (valid, rows.valid(expr)))
            break
    order, count = rows.partition(valid, bound)
    rows.add(symbol, bound, count, call_site(node))
    return (order if source is None else call(aten.index_select.default, (source, 0, order))), order


def _where(node: Node, rows: PaddedRows) -> None:
    """``torch.where(cond)`` on a 1-D cond: the indices of the true rows, as ``nonzero``."""
    if len(node.args) != 1:
        return  # where(cond, a, b) is elementwise
    order = _select(node, None, node.args[0], rows)[0]
    for user in list(node.users):
        if user.target is operator.getitem and user.args[1] == 0:
            _replace(user, order)


def _masked_select(gm: torch.fx.GraphModule, node: Node, rows: PaddedRows) -> None:
    source, mask = node.args[0], node.args[1]
    if source.meta["val"].shape != mask.meta["val"].shape:
        raise CompactionError(f"{call_site(node)}: masked_select with a broadcast mask; index with a mask of x's shape")
    call = gm.graph.call_function
    flat_mask = call(aten.reshape.default, (mask, [-1]))
    flat_mask.meta["val"] = mask.meta["val"].reshape(-1)
    _replace(node, _select(node, call(aten.reshape.default, (source, [-1])), flat_mask, rows)[0])


def _topk(gm: torch.fx.GraphModule, node: Node, rows: PaddedRows) -> None:
    """The top k of padded rows: the padding sorts last, and k is the static ``min(k, bound)``."""
    source, k = node.args[0], node.args[1]
    dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", -1)
    largest = node.args[3] if len(node.args) > 3 else node.kwargs.get("largest", True)
    expr = rows.rows(source)
    if expr is None and not (isinstance(k, Node) and rows.size(k.meta.get("val")) is not None):
        return
    if expr is not None and dim % source.meta["val"].dim() != 0:
        raise CompactionError(f"{call_site(node)}: topk along dim {dim} of selected rows; only along rows is padded")
    args = list(node.args) + [None] * (5 - len(node.args))
    if expr is not None:
        shape = [-1] + [1] * (source.meta["val"].dim() - 1)
        valid = gm.graph.call_function(aten.view.default, (rows.valid(expr), shape))
        padding = float("-inf") if largest in (True, None) else float("inf")
        args[0] = gm.graph.call_function(aten.where.ScalarOther, (valid, source, padding))
    if isinstance(k, Node):
        args[1] = rows.bound(rows.size(k.meta["val"]))
    args[2] = dim
    args[3] = True if largest is None else largest
    args[4] = True  # sorted: the valid results first
    node.args, node.kwargs = tuple(args), {}


def _cat(gm: torch.fx.GraphModule, node: Node, rows: PaddedRows) -> None:
    """Concatenated padded pieces, partitioned again so that all valid rows come first."""
    pieces = node.args[0]
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    exprs = [rows.rows(p) for p in pieces]
    padded_dims = {d for p in pieces for d in rows.dims(p)}
    if not padded_dims:
        return
    if dim % node.meta["val"].dim() != 0:
        if 0 in padded_dims and all(e is not None for e in exprs):
            return  # columns of the same selected rows: a row-wise op
        raise CompactionError(f"{call_site(node)}: cat along dim {dim} of tensors with selected rows of other sizes")
    call = gm.graph.call_function
    def valid(piece: Node, expr: sympy.Expr | None) -> Node:
        if expr is not None:
            return rows.valid(expr)
        return call(aten.ones.default, ([piece.meta["val"].shape[0]],), {"dtype": torch.bool})

    valids = [valid(p, e) for p, e in zip(pieces, exprs, strict=True)]
    total = sum(rows.bound(e) if e is not None else p.meta["val"].shape[0] for p, e in zip(pieces, exprs, strict=True))
    if not isinstance(total, int):
        raise CompactionError(f"{call_site(node)}: cat of selected rows with rows of a dynamic size")
    order, _ = rows.partition(call(aten.cat.default, (valids,)), total)
    joined = call(aten.cat.default, tuple(node.args), dict(node.kwargs))
    _replace(node, call(aten.index_select.default, (joined, 0, order)))


def _index_put(gm: torch.fx.GraphModule, node: Node, rows: PaddedRows) -> None:
    """``dest[index] = values`` by padded indices: the padded rows write to a scratch row past the
    end, which is then dropped, so they never overwrite a row eager leaves alone."""
    dest, indices = node.args[0], node.args[1]
    exprs = [rows.rows(i) for i in indices if i is not None]
    if not any(e is not None for e in exprs):
        return
    if len(indices) != 1:
        raise CompactionError(f"{call_site(node)}: index_put with {len(indices)} index tensors; a row index is padded")
    call = gm.graph.call_function
    shape = [rows.bound(e) if (e := rows.size(size)) is not None else size for size in dest.meta["val"].shape]
    if not all(isinstance(size, int) for size in shape):
        raise CompactionError(f"{call_site(node)}: index_put into a tensor of shape {shape}; a static one is padded")
    scratch = call(aten.new_zeros.default, (dest, [1, *shape[1:]]))
    extended = call(aten.cat.default, ([dest, scratch],))
    index = call(aten.where.ScalarOther, (rows.valid(exprs[0]), indices[0], shape[0]))
    written = call(aten.index_put.default, (extended, [index], *node.args[2:]))
    _replace(node, call(aten.slice.Tensor, (written, 0, 0, shape[0])))


def _nms(gm: torch.fx.GraphModule, nms: Node, rows: PaddedRows) -> None:
    """An NMS becomes ``multiclass_nms`` over the boxes' static rows, padded rows never candidates
    (score -inf). Its kept indices are padded rows in turn; a ``keep[:k]`` right after it caps
    them at k."""
    scores = nms.args[1]
    expr = rows.rows(scores) or rows.rows(nms.args[0])
    size = nms.args[0].meta["val"].shape[0]
    bound = rows.bound(expr) if expr is not None else size
    if not isinstance(bound, int):
        raise CompactionError(f"{call_site(nms)}: an NMS over rows of a data-dependent size {size}")
    if expr is not None:
        scores = gm.graph.call_function(aten.where.ScalarOther, (rows.valid(expr), scores, float("-inf")))
    keep, top_k = nms, bound
    (user, *others) = list(nms.users) or [None]
    if not others and user is not None and _head_slice(user) is not None:
        keep, top_k = user, min(bound, _head_slice(user))
    index, count = multiclass_keep(gm.graph, nms, scores, top_k)
    symbol = nms.meta["val"].shape[0].node.expr
    rows.add(symbol, bound, count, call_site(nms))
    _replace(keep, index)
    if keep is not nms:
        gm.graph.erase_node(nms)


def _head_slice(node: Node) -> int | None:
    """k for ``x[:k]``, else None."""
    if not is_op(node, "aten.slice.Tensor"):
        return None
    args = list(node.args) + [None] * (5 - len(node.args))
    if args[1] == 0 and args[2] in (0, None) and isinstance(args[3], int) and args[4] in (1, None):
        return args[3]
    return None


def _trim_outputs(gm: torch.fx.GraphModule, output: Node, rows: PaddedRows) -> None:
    """Padded rows returned: each distinct count becomes a hidden output that the host trims by,
    and the padding is zeroed, for whoever reads the raw outputs (a Triton client)."""
    leaves = list(output.args[0])
    names = list(gm.meta.get(OUTPUT_NAMES) or [f"output_{i}" for i in range(len(leaves))])
    trim, counts = dict(gm.meta.get(TRIM, {})), {}
    call = gm.graph.call_function
    for number, (name, leaf) in enumerate(zip(names, leaves, strict=True)):
        expr = rows.rows(leaf)
        if expr is None:
            continue
        if expr not in counts:
            count = rows.count(expr)
            if isinstance(count, int):
                count = call(aten.scalar_tensor.default, (count,), {"dtype": torch.long})
            counts[expr] = (_unique(f"row_count_{len(counts)}", names), count)
        shape = [-1] + [1] * (leaf.meta["val"].dim() - 1)
        leaves[number] = call(aten.where.ScalarOther, (call(aten.view.default, (rows.valid(expr), shape)), leaf, 0))
        trim[name] = {"dim": 0, "count": counts[expr][0]}
    if not counts:
        return
    output.args = (tuple(leaves) + tuple(node for _, node in counts.values()),)
    gm.meta[OUTPUT_NAMES] = names + [name for name, _ in counts.values()]
    gm.meta[HIDDEN] = list(gm.meta.get(HIDDEN, [])) + [name for name, _ in counts.values()]
    gm.meta[TRIM] = trim


def _unique(name: str, taken: list[str]) -> str:
    while name in taken:
        name += "_"
    return name


def _shapes(node: Node, rows: PaddedRows) -> None:
    """A padded size used as a shape becomes its bound; used as a value, it is refused."""
    if isinstance(node.meta.get("val"), torch.SymInt) or str(node.target).startswith("aten._assert"):
        return  # size arithmetic: judged where its result is used

    def bound(arg: Node) -> object:
        expr = rows.size(arg.meta.get("val"))
        if expr is None:
            return arg
        if is_op(node, "aten.split_with_sizes.default") and len(node.args[1]) == 1:
            return rows.bound(expr)  # one piece: all the rows (torchvision's per-image split)
        if getattr(node.target, "overloadpacket", None) not in _SHAPES:
            raise CompactionError(
                f"{call_site(node)}: the number of rows selected at {rows.site_of(expr)} is used as a value "
                f"by {node.target}; "
                "a static engine holds the rows at their bound, so the count is not known when the graph "
                "is built. Use the rows themselves (a mask, or padding) rather than their count"
            )
        return rows.bound(expr)

    node.args, node.kwargs = torch.fx.node.map_arg((node.args, node.kwargs), bound)


def _check(node: Node, rows: PaddedRows) -> None:
    """An op reading padded rows must keep them apart: a row-wise op, or a gather of some rows."""
    read = [a for a in node.all_input_nodes if rows.dims(a)]
    if not read or node.target is operator.getitem or isinstance(node.meta.get("val"), torch.SymInt):
        return
    if _gathers_rows(node, rows):
        return
    source = node.args[0]
    along = _along(node)
    if along is not None and along % max(source.meta["val"].dim(), 1) in rows.dims(source):
        raise CompactionError(
            f"{call_site(node)}: {node.target} orders or accumulates along the rows selected at "
            f"{rows.site(source)}, and the padded rows would enter it. Keep the rows apart until an NMS, "
            "or select with a fixed count (topk)"
        )
    value = node.meta.get("val")
    values = value if isinstance(value, (list, tuple)) else [value]
    if not any(rows.dims_of(v) for v in values if isinstance(v, torch.Tensor)):
        raise CompactionError(
            f"{call_site(node)}: {node.target} combines the rows selected at {rows.site(read[0])} (a sum, "
            "sort or reshape across them), and the padded rows would enter it. Keep the rows apart until an NMS, "
            "or select with a fixed "
            "count (topk)"
        )


def _gathers_rows(node: Node, rows: PaddedRows) -> bool:
    """``rows[index]`` by an index of a size of its own (an NMS's kept indices)."""
    if not is_op(node, "aten.index.Tensor", "aten.index_select.default"):
        return False
    index = node.args[1][0] if is_op(node, "aten.index.Tensor") else node.args[2]
    return isinstance(index, Node) and not rows.dims(index)


def _along(node: Node) -> int | None:
    if getattr(node.target, "overloadpacket", None) not in _ALONG:
        return None
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", -1)
    return dim if isinstance(dim, int) else None


def _static_rows(mask: Node, rows: PaddedRows) -> int:
    size = mask.meta["val"].shape[0]
    expr = rows.size(size)
    if expr is not None:
        return rows.bound(expr)
    if isinstance(size, torch.SymInt) and data_symbols(size.node.expr):
        raise CompactionError(f"{call_site(mask)}: a mask over rows of a data-dependent size {size}")
    if not isinstance(size, int):
        raise CompactionError(f"{call_site(mask)}: a mask over rows of a dynamic size {size}; capture one image")
    return size


def _replace(node: Node, new: Node) -> None:
    new.meta["val"] = node.meta["val"]  # the old symbolic size, until refresh_meta
    node.replace_all_uses_with(new)
    node.graph.erase_node(node)
