"""Padded rows returned as outputs: each distinct count becomes a hidden output that the host
trims by (a ``Trim`` in the graph record), and the padding is zeroed, for whoever reads the raw outputs (a
Triton client)."""

from __future__ import annotations

import torch

from fxdeploy.passes.padding.rows import PaddedRows
from fxdeploy.passes.padding.rule import Rule
from fxdeploy.passes.record import Trim, record, update

aten = torch.ops.aten
Node = torch.fx.Node


def _check(node: Node, rows: PaddedRows) -> str | None:
    if node.op != "output":
        return "not the graph's output"
    return None if any(rows.rows(leaf) is not None for leaf in node.args[0]) else "returns no selected rows"


def _replace(gm: torch.fx.GraphModule, output: Node, rows: PaddedRows) -> None:
    leaves = list(output.args[0])
    known = record(gm)
    names = known.names_for(len(leaves))
    trim, counts = dict(known.trim), {}
    call = gm.graph.call_function
    for number, (name, leaf) in enumerate(zip(names, leaves, strict=True)):
        expr = rows.rows(leaf)
        if expr is None:
            continue
        if expr not in counts:
            count = rows.count(expr)
            if isinstance(count, int):
                count = call(aten.scalar_tensor.default, (count,), {"dtype": torch.long})
            counts[expr] = (_unique(f"row_count_{len(counts)}", names), count)
        shape = [-1] + [1] * (leaf.meta["val"].dim() - 1)
        valid = call(aten.view.default, (rows.valid(expr), shape))
        if leaf.meta["val"].dtype == torch.bool:  # and, not where: ONNX Runtime has no Where on booleans
            leaves[number] = call(aten.logical_and.default, (valid, leaf))
        else:
            leaves[number] = call(aten.where.ScalarOther, (valid, leaf, 0))
        trim[name] = Trim(dim=0, count=counts[expr][0])
    output.args = (tuple(leaves) + tuple(node for _, node in counts.values()),)
    added = tuple(name for name, _ in counts.values())
    update(gm, output_names=(*names, *added), hidden=(*known.hidden, *added), trim=trim)


def _unique(name: str, taken: list[str]) -> str:
    while name in taken:
        name += "_"
    return name


TRIM_OUTPUTS = Rule("trim_outputs", _check, _replace)
