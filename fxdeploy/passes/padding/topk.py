"""``topk(x, min(n, k))`` over padded rows: the padding sorts last (-inf, or +inf for the
smallest; an integer type's extreme), and k becomes the static ``min(bound, k)``, so the valid
results come first and their count is ``min(n, k)``, as eager's."""

from __future__ import annotations

import torch

from fxdeploy.passes.graph_utils import call_site, is_op
from fxdeploy.passes.padding.rows import PaddedRows
from fxdeploy.passes.padding.rule import CompactionError, Rule, arg

aten = torch.ops.aten
Node = torch.fx.Node


def _check(node: Node, rows: PaddedRows) -> str | None:
    if not is_op(node, "aten.topk.default"):
        return "not aten.topk"
    k = node.args[1]
    if rows.rows(node.args[0]) is None and not (isinstance(k, Node) and rows.size(k.meta.get("val")) is not None):
        return "neither its rows nor its k come from a selection"
    return None


def _replace(gm: torch.fx.GraphModule, node: Node, rows: PaddedRows) -> None:
    source, k = node.args[0], node.args[1]
    dim, largest = arg(node, 2, "dim", -1), arg(node, 3, "largest", True)
    expr = rows.rows(source)
    if expr is not None and dim % source.meta["val"].dim() != 0:
        raise CompactionError(f"{call_site(node)}: topk along dim {dim} of selected rows; only along rows is padded")
    args = [source, k, dim, True if largest is None else largest, True]  # sorted: the valid results first
    if expr is not None:
        shape = [-1] + [1] * (source.meta["val"].dim() - 1)
        valid = gm.graph.call_function(aten.view.default, (rows.valid(expr), shape))
        padding = _last(source.meta["val"].dtype, args[3])
        args[0] = gm.graph.call_function(aten.where.ScalarOther, (valid, source, padding))
    if isinstance(k, Node):
        args[1] = rows.bound(rows.size(k.meta["val"]))
    node.args, node.kwargs = tuple(args), {}


def _last(dtype: torch.dtype, largest: bool) -> float | int:
    """The value that ranks last: -inf (+inf for the smallest), or the integer type's own extreme,
    as an infinity would make integer rows float."""
    if dtype.is_floating_point:
        return float("-inf") if largest else float("inf")
    info = torch.iinfo(dtype)
    return info.min if largest else info.max


TOPK = Rule("topk", _check, _replace)
