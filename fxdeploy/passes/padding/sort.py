"""``sort``/``argsort`` along selected rows (YOLOv5's ``x[x[:, 4].argsort(descending=True)[:max_nms]]``):
the padded rows are sorted with the valid ones, then moved behind them by a stable partition of the
sorted order. The valid rows come first, in the order a sort of the valid rows alone gives (a stable
sort keeps equal keys in their order; an unstable one leaves them unspecified, as eager does), and
the result is padded rows of the same count.

No key is replaced by a sentinel (-inf/+inf): a valid key can be -inf, +inf or NaN (which sorts
above +inf), and would then tie with or pass the padding. The partition reads only the validity of
each sorted position, so it is exact whatever the keys hold, in either direction.
"""

from __future__ import annotations

import operator

import torch

from fxdeploy.passes.graph_utils import call_site, is_op
from fxdeploy.passes.padding.rows import PaddedRows
from fxdeploy.passes.padding.rule import CompactionError, Rule, arg, replace_node

aten = torch.ops.aten
Node = torch.fx.Node
SORTS = ("aten.sort.default", "aten.sort.stable", "aten.argsort.default", "aten.argsort.stable")


def _options(node: Node) -> tuple[int, bool, bool]:
    """(dim, descending, stable) of a sort/argsort call, whichever overload spells it."""
    if str(node.target).endswith(".stable"):  # (self, *, stable, dim=-1, descending=False)
        stable = node.kwargs.get("stable")
        return node.kwargs.get("dim", -1), bool(node.kwargs.get("descending", False)), bool(stable)
    return arg(node, 1, "dim", -1), bool(arg(node, 2, "descending", False)), False


def _check(node: Node, rows: PaddedRows) -> str | None:
    if not is_op(node, *SORTS):
        return "not aten.sort or aten.argsort"
    source = node.args[0]
    dim = _options(node)[0]
    if not rows.dims(source):
        return "sorts no selected rows"
    if dim % max(source.meta["val"].dim(), 1) not in rows.dims(source):
        return "along a dim other than the selected rows: row-wise"
    return None


def _replace(gm: torch.fx.GraphModule, node: Node, rows: PaddedRows) -> None:
    source = node.args[0]
    if source.meta["val"].dim() != 1:
        raise CompactionError(
            f"{call_site(node)}: {node.target} along the selected rows of a {source.meta['val'].dim()}-D tensor; "
            "only a 1-D key is padded. Sort the key column and gather the rows by its order (x[x[:, 4].argsort()])"
        )
    _, descending, stable = _options(node)
    expr = rows.rows(source)
    call = gm.graph.call_function
    if stable:  # what the user asked for; the ONNX exporter translates only the default overload
        ranked = call(aten.sort.stable, (source,), {"stable": True, "dim": 0, "descending": descending})
    else:
        ranked = call(aten.sort.default, (source, 0, descending))
    order = call(operator.getitem, (ranked, 1))
    sorted_valid = call(aten.index_select.default, (rows.valid(expr), 0, order))
    valid_first, _ = rows.partition(sorted_valid, rows.bound(expr))
    order = call(aten.index_select.default, (order, 0, valid_first))
    if is_op(node, "aten.argsort.default", "aten.argsort.stable"):
        replace_node(node, order)
        return
    for user in list(node.users):  # sort: (values, indices), read through getitem
        if user.target is not operator.getitem:
            raise CompactionError(f"{call_site(node)}: the result of {node.target} is used whole by {user.target}")
        picked = order if user.args[1] == 1 else call(aten.index_select.default, (source, 0, order))
        replace_node(user, picked)
    gm.graph.erase_node(node)


SORT = Rule("sort", _check, _replace)
