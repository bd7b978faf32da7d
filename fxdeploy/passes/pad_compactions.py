"""Mask, don't compact: a boolean-mask selection keeps its static size, valid rows first.

Detection postprocessing filters rows by score (``x[scores > t]``), sometimes twice, and then
computes on the survivors row by row before an NMS. Each such selection has a size that depends
on the data, which static engines cannot hold. This pass replaces every ``x[mask]`` on dim 0 by
``x`` reordered so that the selected rows come first, in their order, and the others after them:
the same shape as ``x``, plus a count. Row-wise work after it (slices of columns, arithmetic, a
class argmax, an in-place write into some columns, a second filter) computes on the padded rows
too and changes nothing on the valid ones. A second filter of the same rows only selects among
the valid ones. An NMS over such rows never takes a padded row as a candidate: its scores are
-inf there, and ``substitute_nms`` then makes the NMS and its consumers static.

The pass refuses, naming the call site, where the padded form cannot equal eager: a reduction or
sort over the filtered rows, or the filtered count itself used as a value.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import call_site, is_op, refresh_meta, size_symbols
from fxdeploy.settings import Settings

aten = torch.ops.aten
Node = torch.fx.Node
NMS_OPS = ("fxdeploy.nms.default", "fxdeploy.batched_nms.default", "torchvision.nms.default")
_DIM_FREE = ("aten.sym_size.int", "aten.sym_numel.default", "aten._assert_scalar.default")


class CompactionError(ValueError):
    """A data-dependent selection whose padded form would not equal eager; the message says where."""


@dataclass(frozen=True)
class Selection:
    """``x[mask]`` on dim 0 of a tensor with a static number of rows."""

    node: Node
    source: Node
    mask: Node
    rows: int
    symbol: str


def match(node: Node) -> Selection | None:
    """The selection ``node`` is, or None; raise CompactionError when it is one this pass cannot pad."""
    if not is_op(node, "aten.index.Tensor") or len(node.args[1]) != 1:
        return None
    mask = node.args[1][0]
    value = getattr(mask, "meta", {}).get("val")
    if not isinstance(value, torch.Tensor) or value.dtype != torch.bool:
        return None
    symbols = size_symbols(node.meta["val"].shape[0])
    if value.dim() != 1 or len(symbols) != 1:
        raise CompactionError(f"{call_site(node)}: a boolean mask of rank {value.dim()}; only a 1-D row mask is padded")
    rows = node.args[0].meta["val"].shape[0]
    if not isinstance(rows, int):
        rows = _static_bound(node.args[0])
    return Selection(node, node.args[0], mask, rows, symbols.pop())


def pad_compactions(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    counts: dict[str, Node] = {}  # the selection's size symbol -> its count of valid rows
    rows: dict[str, int] = {}
    for node in list(gm.graph.nodes):
        selection = match(node)
        if selection is not None:
            _check_consumers(selection, counts)
            counts[selection.symbol] = _pad(gm, selection, counts)
            rows[selection.symbol] = selection.rows
        elif is_op(node, *NMS_OPS):
            _mask_nms_scores(gm, node, counts)
    if not counts:
        return PassResult(gm, False)
    gm.graph.eliminate_dead_code()
    refresh_meta(gm)
    return PassResult(gm, True)


def _pad(gm: torch.fx.GraphModule, s: Selection, counts: dict[str, Node]) -> Node:
    """Replace ``x[mask]`` by x's rows reordered valid-first (a stable partition); return the count."""
    call = gm.graph.call_function
    with gm.graph.inserting_before(s.node):
        valid = s.mask
        earlier = _symbol_of(s.mask) or _symbol_of(s.source)
        if earlier in counts:  # a filter of already-filtered rows: the padding stays out
            valid = call(aten.logical_and.default, (valid, _valid_rows(gm, counts[earlier], s.rows)))
        # Everything derives from one cumsum, so that a host/engine split keeps it together.
        upto = call(aten.cumsum.default, (valid, 0), {"dtype": torch.long})  # valid rows in [0, i]
        count = call(aten.select.int, (upto, 0, -1))
        index = call(aten.arange.default, (s.rows,), {"dtype": torch.long})
        after_valid = call(aten.add.Tensor, (call(aten.sub.Tensor, (index, upto)), count))
        position = call(aten.where.self, (valid, call(aten.sub.Tensor, (upto, 1)), after_valid))
        order = call(aten.scatter.src, (call(aten.zeros_like.default, (index,)), 0, position, index))
        padded = call(aten.index_select.default, (s.source, 0, order))
    padded.meta["val"] = s.node.meta["val"]  # the selection's size symbol, until refresh_meta
    s.node.replace_all_uses_with(padded)
    gm.graph.erase_node(s.node)
    return count


def _valid_rows(gm: torch.fx.GraphModule, count: Node, rows: int) -> Node:
    call = gm.graph.call_function
    return call(aten.lt.Tensor, (call(aten.arange.default, (rows,), {"dtype": torch.long}), count))


def _mask_nms_scores(gm: torch.fx.GraphModule, nms: Node, counts: dict[str, Node]) -> None:
    """Padded rows are never NMS candidates: their scores become -inf."""
    symbol = _symbol_of(nms.args[1]) or _symbol_of(nms.args[0])
    if symbol not in counts:
        return
    scores = nms.args[1]
    rows = _static_bound(scores)
    with gm.graph.inserting_before(nms):
        valid = _valid_rows(gm, counts[symbol], rows)
        masked = gm.graph.call_function(aten.where.ScalarOther, (valid, scores, float("-inf")))
    nms.args = (nms.args[0], masked, *nms.args[2:])


def _check_consumers(s: Selection, counts: dict[str, Node]) -> None:
    """Walk what is computed from the selection's rows: each must keep rows apart (or be an NMS,
    or another selection); one that mixes rows, or reads their count, is refused."""
    stack, seen = list(s.node.users), set()
    while stack:
        node = stack.pop()
        if node in seen or node.op == "output":
            continue
        seen.add(node)
        if str(node.target) in _DIM_FREE:
            if any(u.op != "call_function" or str(u.target) not in _DIM_FREE for u in node.users):
                raise CompactionError(
                    f"{call_site(node)}: the number of rows selected at {call_site(s.node)} is used as a value; "
                    "a static engine holds the rows at their bound, so the count is not known when the graph "
                    "is built. Use the rows themselves (a mask, or padding) rather than their count"
                )
            continue
        if is_op(node, *NMS_OPS) or match(node) is not None or _gathers_rows(node, seen):
            continue  # an NMS never takes a padded row (-inf score), so its kept rows are valid ones
        if _along_rows(node):
            raise CompactionError(
                f"{call_site(node)}: {node.target} orders or accumulates along the rows selected at "
                f"{call_site(s.node)}, and the padded rows would enter it. Keep the rows apart until an NMS"
            )
        value = node.meta.get("val")
        shapes = value if isinstance(value, (list, tuple)) else [value]
        keeps_rows = any(
            isinstance(v, torch.Tensor) and v.dim() and s.symbol in size_symbols(v.shape[0]) for v in shapes
        )
        if not keeps_rows and not _is_item(node):
            raise CompactionError(
                f"{call_site(node)}: {node.target} combines the rows selected at {call_site(s.node)} "
                "(a sum, sort or reshape across them), and the padded rows would enter it. "
                "Keep the rows apart until an NMS, or select with a fixed count (topk)"
            )
        stack.extend(node.users)


def _gathers_rows(node: Node, walked: set[Node]) -> bool:
    """``rows[index]`` by an index computed elsewhere (an NMS's kept indices)."""
    if not is_op(node, "aten.index.Tensor", "aten.index_select.default"):
        return False
    index = node.args[1][0] if is_op(node, "aten.index.Tensor") else node.args[2]
    return isinstance(index, Node) and index not in walked


def _along_rows(node: Node) -> bool:
    """An op that orders or accumulates along dim 0 while keeping its length (sort, cumsum...)."""
    packet = getattr(node.target, "overloadpacket", None)
    if packet not in _ALONG:
        return False
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", -1)
    rank = node.args[0].meta["val"].dim()
    return isinstance(dim, int) and dim % max(rank, 1) == 0


_ALONG = {aten.sort, aten.argsort, aten.cumsum, aten.cumprod, aten.flip, aten.roll, aten._softmax, aten._log_softmax,
          aten.softmax, aten.log_softmax, aten.topk}


def _is_item(node: Node) -> bool:
    return node.target is operator.getitem


def _symbol_of(node: object) -> str | None:
    value = getattr(node, "meta", {}).get("val") if isinstance(node, Node) else None
    if not isinstance(value, torch.Tensor) or not value.dim():
        return None
    symbols = size_symbols(value.shape[0])
    return next(iter(symbols)) if len(symbols) == 1 else None


def _static_bound(node: Node) -> int:
    """Rows of a tensor that a selection already padded: its static bound, from the fake value's
    size hint where torch kept one, else refused."""
    size = node.meta["val"].shape[0]
    if isinstance(size, int):
        return size
    bound = size.node.shape_env.bound_sympy(size.node.expr).upper
    if not bound.is_finite or int(bound) > 2**31:
        raise CompactionError(f"{call_site(node)}: rows of unknown bound {size}")
    return int(bound)
