"""The one spelling of NMS in a lowered graph: ``nms``/``batched_nms`` as ``multiclass_nms``.

Every ``fxdeploy::nms``/``batched_nms`` (what torchvision's functions are substituted with) and
``torchvision::nms`` node becomes ``multiclass_nms`` over the boxes at their static size, padded
rows never candidates (score -inf). Its kept indices are padded rows in turn: valid ones first,
then 0, with their count; a ``keep[:k]`` right after it caps them at k.

torchvision takes corners as given: a flipped box (x2 < x1 or y2 < y1) overlaps nothing, while
``multiclass_nms`` normalizes corners (docs/nms-spec.md). Its flipped axes are collapsed first (x2 =
max(x1, x2), likewise y): a box of zero width or height, which overlaps nothing there either.
"""

from __future__ import annotations

import operator

import torch

from fxdeploy.ops.names import BATCHED_NMS, NMS, TORCHVISION_NMS, is_nms
from fxdeploy.passes.graph_utils import call_site, fill_meta, is_op, size_symbols
from fxdeploy.passes.padding.rows import PaddedRows
from fxdeploy.passes.padding.rule import CompactionError, Rule, replace_node

aten = torch.ops.aten
Node = torch.fx.Node
DATA_DEPENDENT_NMS = (NMS, BATCHED_NMS, TORCHVISION_NMS)


def multiclass_keep(graph: torch.fx.Graph, nms: Node, scores: Node, top_k: int) -> tuple[Node, Node]:
    """Insert the ``multiclass_nms`` that keeps what ``nms`` keeps, at most ``top_k``: the kept
    indices ([top_k] long, padding clamped to row 0) and their count (0-d long)."""
    call = graph.call_function
    boxes = nms.args[0]
    if is_nms(nms, (BATCHED_NMS,)):  # torchvision's trick: classes never overlap
        top = call(aten.add.Tensor, (call(aten.max.default, (boxes,)), 1))
        offsets = call(aten.mul.Tensor, (call(aten._to_copy.default, (nms.args[2],), {"dtype": torch.float32}), top))
        boxes = call(aten.add.Tensor, (boxes, call(aten.unsqueeze.default, (offsets, 1))))
    batched_boxes = call(aten.unsqueeze.default, (unflipped(graph, boxes), 0))
    batched_scores = call(aten.unsqueeze.default, (call(aten.unsqueeze.default, (scores, 0)), 2))
    iou = float(nms.args[-1])
    result = call(
        torch.ops.fxdeploy.multiclass_nms.default,
        (batched_boxes, batched_scores, iou, float("-inf"), top_k, -1, top_k, -1, False),
    )
    index = call(aten.select.int, (call(operator.getitem, (result, 4)), 0, 0))
    count = call(aten.select.int, (call(operator.getitem, (result, 3)), 0, 0))
    return call(aten.clamp.default, (index, 0)), count


def unflipped(graph: torch.fx.Graph, boxes: Node) -> Node:
    """[N, 4] corners with flipped axes collapsed, so that normalizing them changes nothing. Spelled
    as a comparison and a ``where``, which ncnn's cut keeps on the host with the NMS they feed."""
    call = graph.call_function
    low = call(aten.slice.Tensor, (boxes, 1, 0, 2))
    high = call(aten.slice.Tensor, (boxes, 1, 2, 4))
    high = call(aten.where.self, (call(aten.lt.Tensor, (high, low)), low, high))
    return call(aten.cat.default, ([low, high], 1))


def _check(node: Node, rows: PaddedRows) -> str | None:
    return None if is_op(node, *DATA_DEPENDENT_NMS) else f"not one of {DATA_DEPENDENT_NMS}"


def _replace(gm: torch.fx.GraphModule, nms: Node, rows: PaddedRows) -> None:
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
    if not others and user is not None and head_slice(user) is not None:
        keep, top_k = user, min(bound, head_slice(user))
    index, count = multiclass_keep(gm.graph, nms, scores, top_k)
    rows.add(nms.meta["val"].shape[0].node.expr, bound, count, call_site(nms))
    fixed = not size_symbols(keep.meta["val"].shape[0])
    if fixed:  # torch 2.11 fixes keep[:k]'s size at the example's where len() reads it
        fill_meta([keep], fresh_sizes=True)  # keep[:k] again: a size of the kept indices' own
    kept = keep.meta["val"].shape[0]
    if rows.size(kept) is None and size_symbols(kept):  # torch 2.11 names keep[:k]'s size anew (u6 <= u5)
        rows.add(kept.node.expr, top_k, count, call_site(nms))
    replace_node(keep, index)
    if fixed:
        rows.restored.add(index)  # what reads it is computed again from its data-dependent size
    if keep is not nms:
        gm.graph.erase_node(nms)


def head_slice(node: Node) -> int | None:
    """k for ``x[:k]`` with k >= 0, else None (``x[:-1]`` drops a row: it caps nothing)."""
    if not is_op(node, "aten.slice.Tensor"):
        return None
    args = list(node.args) + [None] * (5 - len(node.args))
    if args[1] == 0 and args[2] in (0, None) and isinstance(args[3], int) and args[3] >= 0 and args[4] in (1, None):
        return args[3]
    return None


NMS = Rule("nms", _check, _replace)
