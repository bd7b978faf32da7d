"""``topk`` of a selection as a ``topk`` of the masked rows themselves (the ONNX targets).

torchvision's RetinaNet and FCOS take, per level, ``s = scores[keep]``, ``idx = where(keep)[0]``,
then ``s.topk(min(n, 1000))`` and ``idx[i]`` of its indices. ``pad_compactions`` selects with a
stable partition: a cumsum of the mask, an inverse permutation written by a scatter, and a gather
of every row, over all 1.3 M scores of RetinaNet's first level at 320 px (memory-bound int64 work
that costs twice per element in a batch of 8 what it costs image by image). Where the partition's
rows are read only by such a ``topk``, and its indices only to gather the selected rows or the
partition's order, the ``topk`` runs over ``where(keep, scores, padding)`` instead: its indices are
the original rows, which is what ``idx[i]`` was, and the values are gathered from the scores.

Sound where TopK breaks ties by the lower index, as ONNX's TopK does and fxdeploy's OpenVINO
translation of it: the partition keeps the selected rows in their order (a strictly increasing
map) and their keys, and ranks them all ahead of the padding, so both TopKs list the same selected
rows in the same order; only the padded results (past the count) differ, which no reader of the
count sees. The selection's count becomes a ``sum`` of the mask where the cumsum has no other use.
TorchScript keeps the partition: torch's ``topk`` promises no order among ties.
"""

from __future__ import annotations

import operator

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import fill_meta, is_op
from fxdeploy.settings import Settings

aten = torch.ops.aten
Node = torch.fx.Node


def topk_of_selection(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if node.graph is gm.graph and check(node) is None:
            _replace(gm, node)
            modified = True
    if modified:
        gm.graph.eliminate_dead_code()
        _sums_for_counts(gm)
    return PassResult(gm, modified)


def check(node: Node) -> str | None:
    """None when the ``topk`` reads a partition's rows as described above, else why not."""
    if not is_op(node, "aten.topk.default"):
        return f"{node.name} is not aten.topk"
    parts = _parts(node)
    if isinstance(parts, str):
        return parts
    rows, order = parts["rows"], parts["order"]
    if any(u.target is not operator.getitem for u in node.users):
        return f"{node.name}'s result is read whole"
    for user in node.users:
        if user.args[1] == 0 and user.users:
            return f"{node.name}'s values are read (the padding rule gathers them from the rows)"
        for reader in user.users if user.args[1] == 1 else ():
            if not (_gathers(reader, rows, user) or _indexes(reader, order, user)):
                return f"{node.name}'s indices are read by {reader.name}, not only to gather the rows or their order"
    if set(rows.users) - {parts["key_source"], *_readers(node)}:
        return f"the selected rows {rows.name} have readers besides {node.name}"
    return None


def _parts(topk: Node) -> dict[str, Node] | str:
    """The partition that ``topk``'s key reads: ``where(arange < count, clamp(x[order]), padding)``
    with ``order`` the scatter of ``where(mask, cumsum - 1, ...)`` (``PaddedRows.partition``)."""
    key = topk.args[0]
    if not is_op(key, "aten.where.ScalarOther"):
        return f"{topk.name}'s key is not a where(valid, rows, padding)"
    valid, clamped, _ = key.args
    less = valid.args[0] if is_op(valid, "aten.view.default") else valid
    if not (is_op(less, "aten.lt.Tensor") and is_op(clamped, "aten.clamp_min.default", "aten.clamp_max.default")):
        return f"{topk.name}'s key is not the padding rule's (valid rows by their count, keys clamped)"
    rows = clamped.args[0]
    if not (is_op(rows, "aten.index_select.default") and rows.args[1] == 0 and rows.args[0].meta["val"].dim() == 1):
        return f"{topk.name}'s rows are not a gather of a 1-D tensor"
    order = rows.args[2]
    if not (is_op(order, "aten.scatter.src") and is_op(order.args[2], "aten.where.self")):
        return f"{topk.name}'s rows are not gathered by a partition's order"
    mask, before, _ = order.args[2].args
    upto = before.args[0] if is_op(before, "aten.sub.Tensor") else None
    count = less.args[1]
    if not (is_op(upto, "aten.cumsum.default") and upto.args[0] is mask and is_op(count, "aten.select.int")
            and count.args[0] is upto and count.args[1:] == (0, -1)):
        return f"{topk.name}'s rows and count do not come from one cumsum of the mask"
    if rows.args[0].meta["val"].shape != mask.meta["val"].shape:
        return f"{topk.name}'s rows are gathered from a tensor of another length than the mask"
    return {"rows": rows, "order": order, "mask": mask, "key_source": clamped, "x": rows.args[0]}


def _readers(topk: Node) -> list[Node]:
    return [r for user in topk.users if user.args[1] == 1 for r in user.users]


def _gathers(reader: Node, rows: Node, indices: Node) -> bool:
    return is_op(reader, "aten.gather.default") and reader.args[0] is rows and reader.args[1:] == (0, indices)


def _indexes(reader: Node, order: Node, indices: Node) -> bool:
    return is_op(reader, "aten.index.Tensor") and reader.args[0] is order and list(reader.args[1]) == [indices]


def _replace(gm: torch.fx.GraphModule, topk: Node) -> None:
    parts = _parts(topk)
    assert isinstance(parts, dict)
    clamped, padding = topk.args[0].args[1], topk.args[0].args[2]
    graph = gm.graph
    with graph.inserting_before(topk):
        key = graph.call_function(clamped.target, (parts["x"], *clamped.args[1:]))
        masked = graph.call_function(aten.where.ScalarOther, (parts["mask"], key, padding))
        new = graph.call_function(aten.topk.default, (masked, *topk.args[1:]), dict(topk.kwargs))
        rows = graph.call_function(operator.getitem, (new, 1))
    fill_meta([key, masked, new, rows])
    for user in [u for u in topk.users if u.args[1] == 1]:
        for reader in list(user.users):
            if _gathers(reader, parts["rows"], user):
                with graph.inserting_before(reader):
                    values = graph.call_function(aten.gather.default, (parts["x"], 0, rows))
                fill_meta([values])
                _swap(reader, values)
            else:
                _swap(reader, rows)


def _swap(old: Node, new: Node) -> None:
    new.meta.setdefault("val", old.meta["val"])
    old.replace_all_uses_with(new)
    old.graph.erase_node(old)


def _sums_for_counts(gm: torch.fx.GraphModule) -> None:
    """``cumsum(mask, 0)[-1]`` as ``sum(mask, 0)`` where nothing else reads the cumsum: the same
    integers (a mask, or any integer tensor: no rounding), without writing every partial sum. A
    bool mask of fewer than 2**24 rows is summed in float32, exact there (every partial sum is an
    integer below 2**24), then cast: ONNX Runtime casts 1.3 M bools and sums them in 6.8 ms as
    float32, 26.5 ms as int64 (RetinaNet's first level at batch 8, two threads)."""
    for upto in [n for n in gm.graph.nodes if is_op(n, "aten.cumsum.default")]:
        source, dim = upto.args[0].meta["val"], upto.args[1] if len(upto.args) > 1 else upto.kwargs["dim"]
        if source.is_floating_point() or source.is_complex() or dim % max(source.dim(), 1) != 0:
            continue
        if not all(is_op(u, "aten.select.int") and u.args[1:] in ((0, -1), (-source.dim(), -1)) for u in upto.users):
            continue
        dtype = upto.meta["val"].dtype
        exact = source.dtype == torch.bool and isinstance(source.shape[0], int) and source.shape[0] < 2**24
        for count in list(upto.users):
            with gm.graph.inserting_before(count):
                total = gm.graph.call_function(aten.sum.dim_IntList, (upto.args[0], [0]),
                                               {"dtype": torch.float32 if exact else dtype})
                if exact:
                    fill_meta([total])
                    total = gm.graph.call_function(aten._to_copy.default, (total,), {"dtype": dtype})
            _swap(count, total)
        gm.graph.erase_node(upto)
