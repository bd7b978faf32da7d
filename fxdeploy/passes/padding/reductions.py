"""Reductions over padded rows: the padding takes the reduction's identity first, so that it adds
nothing. ``scores[keep].sum()``, ``iou.max(0)`` over selected boxes, or YOLOv5's merge NMS
(``torch.mm(weights, boxes)`` with ``weights`` [kept, selected]) then equal eager's over the valid
rows: a sum, a product or a matrix product reads zeros (ones) there, a max or a min reads -inf
(inf), ``any`` False and ``all`` True; a softmax along them gives the padding 0. A mean divides the
masked sum by the valid rows' number.
Every input of a matrix product is masked along the dim it contracts (0 * inf would be NaN).
A reduction that is not in this table and loses a padded dim is refused by ``row_wise``.
"""

from __future__ import annotations

import torch

from fxdeploy.passes.graph_utils import is_op
from fxdeploy.passes.padding.rows import PaddedRows
from fxdeploy.passes.padding.rule import Rule, replace_node

aten = torch.ops.aten
Node = torch.fx.Node
Dims = list[int] | None  # None: every dim

# op: (its input's identity, where its reduced dims are: an argument's index, or None for all)
_REDUCTIONS: dict[str, tuple[str, int | None]] = {
    "aten.sum.default": ("zero", None), "aten.sum.dim_IntList": ("zero", 1),
    "aten.mean.default": ("zero", None), "aten.mean.dim": ("zero", 1),
    "aten.prod.default": ("one", None), "aten.prod.dim_int": ("one", 1),
    "aten.amax.default": ("lowest", 1), "aten.max.dim": ("lowest", 1), "aten.max.default": ("lowest", None),
    "aten.amin.default": ("highest", 1), "aten.min.dim": ("highest", 1), "aten.min.default": ("highest", None),
    "aten.argmax.default": ("lowest", 1), "aten.argmin.default": ("highest", 1),
    "aten.logsumexp.default": ("lowest", 1),
    "aten._softmax.default": ("lowest", 1), "aten.softmax.int": ("lowest", 1),
    "aten._log_softmax.default": ("lowest", 1), "aten.log_softmax.int": ("lowest", 1),
    "aten.any.default": ("zero", None), "aten.any.dim": ("zero", 1), "aten.any.dims": ("zero", 1),
    "aten.all.default": ("one", None), "aten.all.dim": ("one", 1), "aten.all.dims": ("one", 1),
}
_PRODUCTS = {"aten.mm.default": (1, 0), "aten.bmm.default": (2, 1), "aten.matmul.default": (-1, -2)}


def _masked(node: Node, rows: PaddedRows) -> list[tuple[int, list[int]]]:
    """(input index, padded dims it reduces) for each input whose padding the reduction would read."""
    name = str(node.target)
    if name in _PRODUCTS:
        wanted = [(i, [d]) for i, d in enumerate(_PRODUCTS[name])]
    elif name in _REDUCTIONS:
        wanted = [(0, _reduced(node, _REDUCTIONS[name][1]))]
    else:
        return []
    masked = []
    for index, dims in wanted:
        value = node.args[index].meta["val"]
        if name == "aten.matmul.default" and value.dim() == 1:
            dims = [0]
        padded = rows.dims_of(value)
        reduced = [d % value.dim() for d in dims] if dims is not None else list(range(value.dim()))
        hit = [d for d in padded if d in reduced]
        if hit:
            masked.append((index, hit))
    return masked


def _reduced(node: Node, position: int | None) -> Dims:
    if position is None:
        return None
    dims = node.args[position] if len(node.args) > position else node.kwargs.get("dim")
    if dims is None or dims == []:
        return None  # amax(x, []) and argmax(x) reduce every dim
    return [dims] if isinstance(dims, int) else list(dims)


def _check(node: Node, rows: PaddedRows) -> str | None:
    if node.op != "call_function" or (str(node.target) not in _REDUCTIONS and str(node.target) not in _PRODUCTS):
        return "not a reduction or a matrix product"
    if is_op(node, "aten.argmax.default", "aten.argmin.default") and _reduced(node, 1) is None:
        return "a flat index over every dim: the padding would shift it (row_wise refuses it)"
    if not _masked(node, rows):
        return "reduces no padded dim"
    return None


def _replace(gm: torch.fx.GraphModule, node: Node, rows: PaddedRows) -> None:
    name = str(node.target)
    identity = "zero" if name in _PRODUCTS else _REDUCTIONS[name][0]
    args = list(node.args)
    for index, dims in _masked(node, rows):
        args[index] = _mask(gm, args[index], dims, identity, rows)
    if name.startswith("aten.mean."):
        _mean(gm, node, args, rows)
        return
    node.args = tuple(args)


def _mask(gm: torch.fx.GraphModule, source: Node, dims: list[int], identity: str, rows: PaddedRows) -> Node:
    """``source`` with its padded entries along ``dims`` set to ``identity``."""
    call = gm.graph.call_function
    value = source.meta["val"]
    fill = _identity(value.dtype, identity)
    for dim in dims:
        valid = rows.valid(rows.size(value.shape[dim]))
        shape = [-1] + [1] * (value.dim() - dim - 1)
        source = call(aten.where.ScalarOther, (call(aten.view.default, (valid, shape)), source, fill))
    return source


def _identity(dtype: torch.dtype, identity: str) -> bool | int | float:
    if dtype == torch.bool:
        return identity in ("one", "highest")
    if identity in ("zero", "one"):
        return 0 if identity == "zero" else 1
    if dtype.is_floating_point:
        return float("-inf") if identity == "lowest" else float("inf")
    return int(torch.iinfo(dtype).min) if identity == "lowest" else int(torch.iinfo(dtype).max)


def _mean(gm: torch.fx.GraphModule, node: Node, args: list, rows: PaddedRows) -> None:
    """mean = the masked sum / the number of valid entries it summed."""
    call = gm.graph.call_function
    source = node.args[0].meta["val"]
    dims = _reduced(node, 1) if str(node.target) == "aten.mean.dim" else None
    reduced = [d % source.dim() for d in dims] if dims is not None else list(range(source.dim()))
    keepdim = bool(args[2]) if len(args) > 2 else bool(node.kwargs.get("keepdim", False))
    dtype = node.kwargs.get("dtype", args[3] if len(args) > 3 else None)
    total = call(aten.sum.dim_IntList, (args[0], reduced, keepdim), {"dtype": dtype} if dtype is not None else {})
    number: Node | int = 1
    for d in reduced:
        expr = rows.size(source.shape[d])
        size = rows.count(expr) if expr is not None else int(source.shape[d])
        if isinstance(size, int) and isinstance(number, int):
            number *= size
        else:
            number = call(aten.mul.Tensor, (size, number) if isinstance(size, Node) else (number, size))
    replace_node(node, call(aten.div.Tensor, (total, number)))


REDUCTIONS = Rule("reductions", _check, _replace)
