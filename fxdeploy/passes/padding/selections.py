"""Selections by a boolean mask become a stable partition: the selected rows first, in their
order, then the others, at the static size of the rows they were selected from.

``x[mask]``, ``nonzero(mask)``, ``where(mask)`` and ``masked_select(x, mask)`` all select; the
first and last select rows of ``x``, the middle two the indices of the true rows. A mask over rows
that are padded already (a second filter) keeps the padding out.
"""

from __future__ import annotations

import operator

import sympy
import torch

from fxdeploy.passes.graph_utils import call_site, is_op
from fxdeploy.passes.padding.rows import PaddedRows, data_symbols
from fxdeploy.passes.padding.rule import CompactionError, Rule, replace_node

aten = torch.ops.aten
Node = torch.fx.Node


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
    return None if is_op(node, "aten.nonzero.default") else "not aten.nonzero"


def _replace_nonzero(gm: torch.fx.GraphModule, node: Node, rows: PaddedRows) -> None:
    order = select(node, None, node.args[0], rows)[0]
    replace_node(node, gm.graph.call_function(aten.unsqueeze.default, (order, 1)))


def _check_where(node: Node, rows: PaddedRows) -> str | None:
    if not is_op(node, "aten.where.default"):
        return "not aten.where(cond)"
    return None if len(node.args) == 1 else "where(cond, a, b) is elementwise"


def _replace_where(gm: torch.fx.GraphModule, node: Node, rows: PaddedRows) -> None:
    order = select(node, None, node.args[0], rows)[0]
    for user in list(node.users):
        if user.target is operator.getitem and user.args[1] == 0:
            replace_node(user, order)


def _check_masked_select(node: Node, rows: PaddedRows) -> str | None:
    return None if is_op(node, "aten.masked_select.default") else "not aten.masked_select"


def _replace_masked_select(gm: torch.fx.GraphModule, node: Node, rows: PaddedRows) -> None:
    source, mask = node.args[0], node.args[1]
    if source.meta["val"].shape != mask.meta["val"].shape:
        raise CompactionError(f"{call_site(node)}: masked_select with a broadcast mask; index with a mask of x's shape")
    call = gm.graph.call_function
    flat_mask = call(aten.reshape.default, (mask, [-1]))
    flat_mask.meta["val"] = mask.meta["val"].reshape(-1)
    replace_node(node, select(node, call(aten.reshape.default, (source, [-1])), flat_mask, rows)[0])


BOOL_INDEX = Rule("bool_index", _check_index, _replace_index)
NONZERO = Rule("nonzero", _check_nonzero, _replace_nonzero)
WHERE = Rule("where_cond", _check_where, _replace_where)
MASKED_SELECT = Rule("masked_select", _check_masked_select, _replace_masked_select)


def select(node: Node, source: Node | None, mask: Node, rows: PaddedRows) -> tuple[Node, Node]:
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
