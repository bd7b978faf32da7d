"""Selected rows written into a buffer of fixed size, and their count returned as a tensor: the
export-friendly postprocess (``out = torch.full((max_det, 6), -1.0)``, ``out[:n] = rows``,
``return out, torch.tensor(n)``).

- ``slice_scatter(base, rows, dim, 0, n)`` with ``n`` a count of padded rows: the rows at their
  bound (valid first) where the row index is below the count, ``base`` where it is not; eager
  writes the first ``n`` rows and leaves the others, so the two agree row for row.
- ``scalar_tensor(n)``: the count's own node (a 0-d long tensor), in the dtype asked for.
"""

from __future__ import annotations

import torch

from fxdeploy.passes.graph_utils import call_site, is_op
from fxdeploy.passes.padding.rows import PaddedRows
from fxdeploy.passes.padding.rule import CompactionError, Rule, arg, replace_node

aten = torch.ops.aten
Node = torch.fx.Node


def _count_arg(value: object, rows: PaddedRows) -> object:
    return rows.size(value.meta.get("val")) if isinstance(value, Node) else None


def _check(node: Node, rows: PaddedRows) -> str | None:
    if is_op(node, "aten.scalar_tensor.default"):
        return None if _count_arg(node.args[0], rows) is not None else "a number, not a count of selected rows"
    if not is_op(node, "aten.slice_scatter.default"):
        return "not slice_scatter or scalar_tensor"
    if _count_arg(arg(node, 4, "end", None), rows) is None:
        return "its end is not a count of selected rows"
    return None


def _replace(gm: torch.fx.GraphModule, node: Node, rows: PaddedRows) -> None:
    call = gm.graph.call_function
    if is_op(node, "aten.scalar_tensor.default"):
        count = rows.count(_count_arg(node.args[0], rows))
        dtype = node.kwargs.get("dtype") or torch.float32
        value = call(aten.scalar_tensor.default, (count,), {"dtype": dtype}) if isinstance(count, int) else \
            call(aten._to_copy.default, (count,), {"dtype": dtype})
        replace_node(node, value)
        return
    base, src = node.args[0], node.args[1]
    dim, start, step = arg(node, 2, "dim", 0), arg(node, 3, "start", None), arg(node, 5, "step", 1)
    expr = _count_arg(arg(node, 4, "end", None), rows)
    if start not in (None, 0) or step != 1:
        raise CompactionError(f"{call_site(node)}: writes the rows selected at {rows.site_of(expr)} from row {start} "
                              f"by {step}; only a write of the first rows (out[:n] = rows) is padded")
    shape = base.meta["val"].shape
    dim = dim % len(shape)
    if not isinstance(shape[dim], int):
        raise CompactionError(f"{call_site(node)}: writes the rows selected at {rows.site_of(expr)} into a "
                              f"buffer of {shape[dim]} rows; only a buffer of a fixed size (torch.full((k, ...), "
                              "...)) is padded")
    bound = min(rows.bound(expr), int(shape[dim]))
    view = [-1] + [1] * (len(shape) - dim - 1)
    valid = call(aten.view.default, (call(aten.slice.Tensor, (rows.valid(expr), 0, 0, bound)), view))
    head = call(aten.slice.Tensor, (base, dim, 0, bound))
    src = call(aten.slice.Tensor, (src, dim, 0, bound))  # its rows at their bound, valid first
    written = call(aten.where.self, (valid, src, head))
    replace_node(node, call(aten.slice_scatter.default, (base, written, dim, 0, bound)))


WRITES = Rule("writes", _check, _replace)
