"""``cat`` of padded pieces along their rows (a feature pyramid's levels): the concatenation is
partitioned again by the pieces' valid rows, so that all valid rows come first, in eager's order.
Where their sizes add up to fewer rows than their bounds do (``cat([keep, keep.new_full((k - len(keep),),
-1)])``, a fixed-size output: k rows; ``max(0, k - len(keep))`` of fill: ``Max(k, u)`` rows), the
result is the partition's first rows, as many as that sum can reach.
Columns of the same selected rows (``cat([boxes, scores], 1)``) are row-wise and stay as they are."""

from __future__ import annotations

import sympy
import torch

from fxdeploy.passes.graph_utils import call_site, is_op
from fxdeploy.passes.padding.rows import PaddedRows
from fxdeploy.passes.padding.rule import CompactionError, Rule, arg, replace_node

aten = torch.ops.aten
Node = torch.fx.Node


def _check(node: Node, rows: PaddedRows) -> str | None:
    if not is_op(node, "aten.cat.default"):
        return "not aten.cat"
    if not any(rows.dims(p) for p in node.args[0]):
        return "no piece holds selected rows"
    dim = arg(node, 1, "dim", 0)
    if dim % node.meta["val"].dim() != 0 and all(rows.rows(p) is not None for p in node.args[0]):
        return "columns of the same selected rows: row-wise"
    return None


def _replace(gm: torch.fx.GraphModule, node: Node, rows: PaddedRows) -> None:
    pieces = node.args[0]
    if arg(node, 1, "dim", 0) % node.meta["val"].dim() != 0:
        raise CompactionError(f"{call_site(node)}: cat along dim {node.args[1]} of tensors with selected rows of "
                              "other sizes")
    exprs = [rows.rows(p) for p in pieces]
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
    result = call(aten.index_select.default, (joined, 0, order))
    size = node.meta["val"].shape[0]
    expr = rows.size(size)
    most = size if isinstance(size, int) else rows.bound(expr) if expr is not None else total
    if most < total:  # rows, then fills up to k (Max(k, u) rows, or k): the valid rows come first
        result = call(aten.slice.Tensor, (result, 0, 0, most))
    replace_node(node, result)


CAT = Rule("cat", _check, _replace)
