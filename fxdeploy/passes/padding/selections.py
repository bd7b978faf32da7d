"""Selections by a boolean mask become a stable partition: the selected rows first, in their
order, then the others, at the static size of the rows they were selected from.

``x[mask]``, ``nonzero(mask)``, ``where(mask)`` and ``masked_select(x, mask)`` all select; the
first and last select rows of ``x``, the middle two the indices of the true rows. A mask of rank r
(detectron2's ``scores[scores > t]`` over an [HW, C] grid) selects over the first r dims
flattened, in row-major order as eager does; ``nonzero`` of it is the flat index unravelled. A mask
that is not bool (``where(m, 1, 0).nonzero()``) selects where it is non-zero. A mask over rows
that are padded already (a second filter) keeps the padding out.
"""

from __future__ import annotations

import math
import operator

import sympy
import torch

from fxdeploy.passes.graph_utils import call_site, is_op
from fxdeploy.passes.padding.rows import PaddedRows, data_symbols
from fxdeploy.passes.padding.rule import CompactionError, Rule, replace_node

aten = torch.ops.aten
Node = torch.fx.Node
_MAX_PADDED_ROWS = 1 << 22  # a mask over more rows than this at the dims' largest sizes is refused


def _check_index(node: Node, rows: PaddedRows) -> str | None:
    if not is_op(node, "aten.index.Tensor"):
        return "not aten.index"
    indices = node.args[1]
    value = getattr(indices[0], "meta", {}).get("val") if len(indices) == 1 else None
    if not (isinstance(value, torch.Tensor) and value.dtype == torch.bool):
        return "indexed by integers, not by one boolean mask"
    return None


def _replace_index(gm: torch.fx.GraphModule, node: Node, rows: PaddedRows) -> None:
    replace_node(node, select(node, node.args[0], node.args[1][0], rows)[0])


def _check_nonzero(node: Node, rows: PaddedRows) -> str | None:
    return None if is_op(node, "aten.nonzero.default", "aten.argwhere.default") else "not aten.nonzero"


def _replace_nonzero(gm: torch.fx.GraphModule, node: Node, rows: PaddedRows) -> None:
    mask = node.args[0]
    order = _within(select(node, None, mask, rows)[0], mask, rows)
    columns = unravel(gm.graph, order, mask.meta["val"].shape, rows)
    call = gm.graph.call_function
    indices = call(aten.stack.default, (columns, 1)) if len(columns) > 1 else call(aten.unsqueeze.default, (order, 1))
    replace_node(node, indices)


def _check_where(node: Node, rows: PaddedRows) -> str | None:
    if is_op(node, "aten.nonzero_numpy.default"):  # nonzero(as_tuple=True): where(cond)'s columns
        return None
    if not is_op(node, "aten.where.default"):
        return "not aten.where(cond)"
    return None if len(node.args) == 1 else "where(cond, a, b) is elementwise"


def _replace_where(gm: torch.fx.GraphModule, node: Node, rows: PaddedRows) -> None:
    cond = node.args[0]
    order = _within(select(node, None, cond, rows)[0], cond, rows)
    columns = unravel(gm.graph, order, cond.meta["val"].shape, rows)
    for user in list(node.users):
        if user.target is operator.getitem:
            replace_node(user, columns[user.args[1]])


def _check_masked_select(node: Node, rows: PaddedRows) -> str | None:
    return None if is_op(node, "aten.masked_select.default") else "not aten.masked_select"


def _replace_masked_select(gm: torch.fx.GraphModule, node: Node, rows: PaddedRows) -> None:
    source, mask = node.args[0], node.args[1]
    if source.meta["val"].shape != mask.meta["val"].shape:
        raise CompactionError(f"{call_site(node)}: masked_select with a broadcast mask; index with a mask of x's shape")
    replace_node(node, select(node, source, mask, rows)[0])


BOOL_INDEX = Rule("bool_index", _check_index, _replace_index)
NONZERO = Rule("nonzero", _check_nonzero, _replace_nonzero)
WHERE = Rule("where_cond", _check_where, _replace_where)
MASKED_SELECT = Rule("masked_select", _check_masked_select, _replace_masked_select)


def select(node: Node, source: Node | None, mask: Node, rows: PaddedRows) -> tuple[Node, Node]:
    """Pad a selection of ``source``'s rows (of an arange when None) by a mask over its first
    dims: register its size symbol and return (the padded rows, their flat order)."""
    selected = node.meta["val"]
    selected = selected[0] if isinstance(selected, (list, tuple)) else selected
    symbol = selected.shape[0].node.expr if isinstance(selected.shape[0], torch.SymInt) else None
    if not isinstance(symbol, sympy.Symbol):
        raise CompactionError(
            f"{call_site(node)}: the capture fixed the number of rows selected here at {selected.shape[0]}, the "
            "example's count: Python read it as a number (len(x), int(x.shape[0]), range(n), a branch on n == "
            f"{selected.shape[0]}), and one engine serves every count. `if not len(x): continue` does so, where "
            "`if not x.shape[0]: continue` does not (fxdeploy checks that branch against eager where the selection "
            "keeps none). Write x.shape[0] where len(x) stood, use the size as a shape (x.view(-1, ...)), or branch "
            "with tensor ops (torch.where, torch.cond)"
        )
    sizes = _static_sizes(mask, rows)
    order, count = _partition(mask, sizes, rows)
    rows.add(symbol, math.prod(sizes), count, call_site(node))
    if source is None:
        return order, order
    call = rows.graph.call_function
    trailing = source.meta["val"].shape[len(sizes):]  # padding dim 0 (a new node, no meta yet) keeps them
    if not isinstance(mask.meta["val"].shape[0], int) and rows.rows(mask) is None:  # rows the input dims decide
        source = _padded(source, sizes[0], rows)
    if len(sizes) > 1:
        source = call(aten.reshape.default, (source, [math.prod(sizes), *[_static(s, node, rows) for s in trailing]]))
    return call(aten.index_select.default, (source, 0, order)), order


def _within(order: Node, mask: Node, rows: PaddedRows) -> Node:
    """Indices into a mask whose rows the input dims decide, padded at their largest number: the
    padding's indices past the mask's own rows (which index the unpadded input: ``boxes[i][keep]``)
    are moved onto its last row, so that every index is in range and the valid ones unchanged."""
    value = mask.meta["val"]
    if isinstance(value.shape[0], int) or rows.rows(mask) is not None:
        return order
    call = rows.graph.call_function
    last = call(operator.sub, (call(operator.mul, (call(aten.sym_size.int, (mask, 0)), math.prod(value.shape[1:]))), 1))
    return call(aten.clamp.default, (order, None, last))


def _partition(mask: Node, sizes: list[int], rows: PaddedRows) -> tuple[Node, Node]:
    """The flat order with the true entries of ``mask`` first, and their count; one partition
    per mask, shared by every selection made by it (detectron2 both indexes and takes nonzero)."""
    if mask in rows.partitions:
        return rows.partitions[mask]
    call = rows.graph.call_function
    valid = mask
    if mask.meta["val"].dtype != torch.bool:  # nonzero of numbers: where they are not 0
        valid = call(aten.ne.Scalar, (mask, 0))
    if not isinstance(mask.meta["val"].shape[0], int) and rows.rows(mask) is None:
        valid = _padded(valid, sizes[0], rows)  # at its bound: the rows past the input's are not selected
    expr = rows.rows(mask)
    if expr is not None:  # a filter of already-selected rows: the padding stays out
        shape = [-1] + [1] * (len(sizes) - 1)
        valid = call(aten.logical_and.default, (valid, call(aten.view.default, (rows.valid(expr), shape))))
    if len(sizes) > 1:
        valid = call(aten.reshape.default, (valid, [-1]))
    rows.partitions[mask] = rows.partition(valid, math.prod(sizes))
    return rows.partitions[mask]


def unravel(graph: torch.fx.Graph, flat: Node, shape: torch.Size, rows: PaddedRows) -> list[Node]:
    """The index along each dim of ``shape`` of each flat (row-major) index in ``flat``."""
    sizes = [rows.bound(e) if (e := rows.size(s)) is not None else s for s in shape]
    columns = []
    for dim, size in enumerate(sizes):
        stride = math.prod(sizes[dim + 1:])
        column = flat if stride == 1 else graph.call_function(aten.div.Tensor_mode, (flat, stride),
                                                              {"rounding_mode": "floor"})
        if math.prod(sizes[:dim]) > 1:  # below the first dim: wrap around
            column = graph.call_function(aten.remainder.Scalar, (column, size))
        columns.append(column)
    return columns


def _static_sizes(mask: Node, rows: PaddedRows) -> list[int]:
    """The sizes of the dims a mask selects over: static, or padded rows (at their bound) on dim 0."""
    sizes = []
    for dim, size in enumerate(mask.meta["val"].shape):
        expr = rows.size(size)
        if expr is not None and dim == 0:
            sizes.append(rows.bound(expr))
        elif expr is not None:
            raise CompactionError(f"{call_site(mask)}: a mask whose dim {dim} holds selected rows; only dim 0 may")
        elif isinstance(size, torch.SymInt) and data_symbols(size.node.expr):
            raise CompactionError(f"{call_site(mask)}: a mask over rows of a data-dependent size {size}")
        elif not isinstance(size, int) and dim == 0 and (bound := _upper_bound(size)) is not None:
            sizes.append(bound)  # as many rows as the input dims' largest sizes give; the rest padding
        elif not isinstance(size, int):
            raise CompactionError(f"{call_site(mask)}: {_dynamic_rows(mask, size)}")
        else:
            sizes.append(size)
    if not sizes:
        raise CompactionError(f"{call_site(mask)}: a selection by a 0-d mask; index with a mask over rows")
    return sizes


def _upper_bound(size: torch.SymInt) -> int | None:
    """The largest value a size the input dims decide takes over their ranges (None: unbounded)."""
    node = size.node
    upper = node.shape_env.bound_sympy(node.expr).upper
    try:  # an unbounded dim's range ends at torch's int_oo (or sympy's oo)
        bound = int(upper)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return None
    return bound if 0 < bound <= _MAX_PADDED_ROWS else None


def _padded(node: Node, bound: int, rows: PaddedRows) -> Node:
    """``node`` (rows of a dynamic number on dim 0, at most ``bound``) at ``bound`` rows: zeros
    (False) after its own. A cat with ``bound`` zero rows, then its first ``bound``."""
    value = node.meta["val"]
    call = rows.graph.call_function
    filler = call(aten.zeros.default, ([bound, *value.shape[1:]],), {"dtype": value.dtype})
    return call(aten.slice.Tensor, (call(aten.cat.default, ([node, filler], 0)), 0, 0, bound))


def _dynamic_rows(mask: Node, size: torch.SymInt) -> str:
    """Why a mask over an unbounded number of rows is refused, naming the input dims the number comes from."""
    symbols = size.node.expr.free_symbols
    dims = [(node.name, axis) for node in mask.graph.nodes if node.op == "placeholder"
            if isinstance(value := node.meta.get("val"), torch.Tensor)
            for axis, dim in enumerate(value.shape)
            if isinstance(dim, torch.SymInt) and dim.node.expr.free_symbols & symbols]
    named = ", ".join(f"{name!r} dim {axis}" for name, axis in dims) or "no input"
    return (f"a mask over a number of rows that the dynamic dims of {named} decide ({size}), with no bound: "
            f"fxdeploy pads a selection to the most rows those dims' largest sizes give (at most {_MAX_PADDED_ROWS}), "
            "so give those dims a max (('h', 64, 640)) or make them static")


def _static(size: object, node: Node, rows: PaddedRows) -> int:
    if isinstance(size, int):
        return size
    raise CompactionError(f"{call_site(node)}: a selection of rows of size {size} past the mask's dims; "
                          "only static sizes there are padded")
