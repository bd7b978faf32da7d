"""``F.pad`` of selected rows, or by their count, as the ``cat`` of fills it stands for.

torch.export keeps ``F.pad`` as ``aten.pad`` (mode ``constant``), a decomposition as ``constant_pad_nd``.

``F.pad(keep, (0, k - keep.shape[0]), value=-1)`` (a fixed-size output) and ``F.pad(keep, (1, 2))``
pad a dim whose size the data decides, or by an amount it decides. ``constant_pad_nd`` with no
negative amount is, dim by dim from the last, ``cat([full(before), x, full(after)], dim)``, each fill
of ``value`` in ``x``'s dtype: the same elements in the same places. Written so before the padding
rules run, the fills' data-dependent sizes are ``row_wise``'s (a size in ``full``) and the join
``cat``'s (valid rows first), as where the user wrote the ``cat`` of fills. Left to ``row_wise`` as
it was, the fills would sit after the padded rows' padding, which would pass for valid rows.

A negative amount crops; it is left as it is (row_wise refuses what it cannot hold), as is a pad
that neither reads a data-dependent size nor pads by one.
"""

from __future__ import annotations

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from fxdeploy.passes.graph_utils import replaced_by, size_symbols

aten = torch.ops.aten
Node = torch.fx.Node


def pads_as_cats(gm: torch.fx.GraphModule) -> bool:
    """Every ``constant_pad_nd`` that ``check`` matches, as cats of fills; whether there was one."""
    matched = [node for node in gm.graph.nodes if check(node) is None]
    for node in matched:
        _replace(gm, node)
    return bool(matched)


def check(node: Node) -> str | None:
    """None where ``node`` pads a data-dependent dim, or by a data-dependent amount, by no negative amount."""
    if node.op != "call_function" or node.target not in (aten.constant_pad_nd.default, aten.pad.default):
        return "not aten.constant_pad_nd or aten.pad"
    if node.target is aten.pad.default and _arg(node, 2, "mode", "constant") != "constant":
        return "a reflect, replicate or circular pad reads the rows it pads"
    x, pads = node.args[0], _amounts(node)
    if any(not statically_known_true(p >= 0) for p in pads):
        return "a negative (or possibly negative) amount crops"
    shape = x.meta["val"].shape
    padded = [shape[-1 - i // 2] for i, p in enumerate(pads) if not statically_known_true(p == 0)]
    if not any(size_symbols(s) for s in (*padded, *pads)):
        return "no data-dependent size padded, nor by one"
    return None


def _arg(node: Node, index: int, name: str, default: object) -> object:
    given = node.args[index] if len(node.args) > index else node.kwargs.get(name, default)
    return default if given is None else given


def _amounts(node: Node) -> list[int | torch.SymInt]:
    return [p.meta["val"] if isinstance(p, Node) else p for p in node.args[1]]


def _replace(gm: torch.fx.GraphModule, node: Node) -> None:
    x, pads = node.args[0], list(node.args[1])
    value = _arg(node, 2 if node.target is aten.constant_pad_nd.default else 3, "value", 0.0)
    call = gm.graph.call_function
    amounts = _amounts(node)
    dtype, device = x.meta["val"].dtype, x.meta["val"].device  # a fill reads no rows (not x.new_full)
    created: list[Node] = []  # their values in one go: the cat's input brings the capture's fake mode
    with gm.graph.inserting_before(node):
        for i in range(0, len(pads), 2):
            dim = x.meta["val"].dim() - 1 - i // 2
            if statically_known_true(amounts[i] == 0) and statically_known_true(amounts[i + 1] == 0):
                continue
            fills: dict[str, Node] = {}
            for pad, amount, side in ((pads[i], amounts[i], "before"), (pads[i + 1], amounts[i + 1], "after")):
                if not statically_known_true(amount == 0):
                    size = [pad if d == dim else _size(gm, x, d, created) for d in range(x.meta["val"].dim())]
                    fills[side] = call(aten.full.default, (size, value), {"dtype": dtype, "device": device})
                    created.append(fills[side])
            pieces = [p for p in (fills.get("before"), x, fills.get("after")) if p is not None]
            x = call(aten.cat.default, (pieces, dim))
            created.append(x)
            replaced_by(created, node)
            created = []
    node.replace_all_uses_with(x)
    gm.graph.erase_node(node)


def _size(gm: torch.fx.GraphModule, x: Node, dim: int, created: list[Node]) -> int | Node:
    size = x.meta["val"].shape[dim]
    if isinstance(size, int):
        return size
    created.append(gm.graph.call_function(aten.sym_size.int, (x, dim)))
    return created[-1]

