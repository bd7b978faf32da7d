"""``topk(x, min(n, k))`` over padded rows: the padding sorts last, and k becomes the static
``min(bound, k)``, so the valid results come first and their count is ``min(n, k)``, as eager's.

Float keys are finite: the padding is one step inside the type's finite range (the lowest value
but one, for the largest first), and the valid keys are clamped a step further in, so every valid
row ranks strictly ahead of the padding whatever a runtime does with ties; the values are then
gathered from the rows themselves. Never -inf: ONNX Runtime's CUDA TopK pads its rows with the
lowest finite value, and a kept key at or below it loses to that padding, which returns indices
past the row (``fxdeploy.lowering.onnx_translations._common.LOWEST``). The one difference from
eager this leaves: valid keys within two steps of the extreme (-inf included) rank as equals.
Integer keys pad with the type's own extreme, as an infinity would make integer rows float."""

from __future__ import annotations

import operator

import torch

from fxdeploy.passes.graph_utils import call_site, is_op
from fxdeploy.passes.padding.rows import PaddedRows
from fxdeploy.passes.padding.rule import CompactionError, Rule, arg, replace_node

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
    call = gm.graph.call_function
    dtype = source.meta["val"].dtype
    floats = expr is not None and dtype.is_floating_point
    if expr is not None:
        shape = [-1] + [1] * (source.meta["val"].dim() - 1)
        valid = call(aten.view.default, (rows.valid(expr), shape))
        key = source
        if floats:  # valid keys a step inside the padding
            clamp = aten.clamp_min.default if args[3] else aten.clamp_max.default
            key = call(clamp, (source, _last(dtype, args[3], 2)))
        args[0] = call(aten.where.ScalarOther, (valid, key, _last(dtype, args[3], 1)))
    if isinstance(k, Node):
        if rows.size(k.meta.get("val")) is None:
            raise CompactionError(
                f"{call_site(node)}: topk of the rows selected at {rows.site(source)} takes k from the data "
                f"({k.name}), not from a count of rows; a static engine needs k fixed. Use min(k, rows.shape[0]) "
                "(len(rows) reads the count as a Python number, which the capture fixes)"
            )
        args[1] = rows.bound(rows.size(k.meta["val"]))
    node.args, node.kwargs = tuple(args), {}
    if floats:  # the values themselves, not the clamped keys
        for user in [u for u in node.users if u.target is operator.getitem and u.args[1] == 0]:
            with gm.graph.inserting_after(user):
                indices = call(operator.getitem, (node, 1))
            indices.meta["val"] = node.meta["val"][1]
            with gm.graph.inserting_after(indices):
                values = call(aten.gather.default, (source, 0, indices))
            replace_node(user, values)


_BITS = {
    torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32, torch.float64: torch.int64,
}


def _last(dtype: torch.dtype, largest: bool, steps: int) -> float | int:
    """The value ``steps`` float steps inside the type's extreme that ranks last (the lowest for
    the largest first); an integer type's own extreme."""
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        return info.min if largest else info.max
    edge = torch.finfo(dtype).min if largest else torch.finfo(dtype).max
    bits = torch.tensor([edge], dtype=dtype).view(_BITS[dtype]) - steps  # toward zero, either sign
    return bits.view(dtype).item()


TOPK = Rule("topk", _check, _replace)
