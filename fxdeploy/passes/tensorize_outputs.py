"""Make every graph output a named tensor.

torch.export already flattens lists, tuples, dicts and dataclasses into leaves; what reaches here
can still hold Python constants (None, 3, "xyxy") and symbolic ints (``x.shape[0]``). Engines
return only tensors, so constants leave the graph and are recorded for the host to put back,
and symbolic ints become 0-d int64 tensors that the host turns back into ints.
"""

from __future__ import annotations

from typing import Any

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.output_rows import describe_rows
from fxdeploy.passes.record import GraphRecord, record, update
from fxdeploy.settings import Settings

_CONSTANT_TYPES = (type(None), bool, int, float, str)


def tensorize_outputs(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    output = next(n for n in gm.graph.nodes if n.op == "output")
    leaves = list(output.args[0]) if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
    known = record(gm)
    names = known.names_for(len(leaves))
    if len(names) != len(leaves):
        raise ValueError(f"{len(names)} output names for {len(leaves)} graph outputs")
    described: list[dict[str, Any]] = []
    kept: list[torch.fx.Node] = []
    trimmed = {leaf: known.trim[name].dim for leaf, name in zip(leaves, names, strict=True) if name in known.trim}
    rows = describe_rows(gm, leaves, trimmed)
    modified = False
    for leaf, name in zip(leaves, names, strict=True):
        if isinstance(leaf, torch.fx.Node) and isinstance(leaf.meta.get("val"), torch.Tensor):
            described.append(_tensor_leaf(name, known, rows.get(leaf), names))
            kept.append(leaf)
        elif isinstance(leaf, torch.fx.Node):
            with gm.graph.inserting_before(output):
                kept.append(_as_tensor(gm, leaf))
            described.append({"kind": "scalar", "name": name, "type": _scalar_type(leaf)})
            modified = True
        elif isinstance(leaf, _CONSTANT_TYPES):
            described.append({"kind": "constant", "name": name, "value": leaf})
            modified = True
        else:
            raise TypeError(
                f"output {name!r} is a {type(leaf).__name__}, which no engine can return; "
                "return tensors, or Python constants (None, bool, int, float, str)"
            )
    if modified:
        output.args = (tuple(kept),)
    update(gm, output_leaves=tuple(described))
    return PassResult(gm, modified)


def _tensor_leaf(name: str, known: GraphRecord, rows: dict[str, Any] | None, names: list[str]) -> dict[str, Any]:
    """A tensor output's description; where it holds rows that float noise may reorder or flip
    (``fxdeploy.passes.output_rows``), what lower()'s check needs to compare them as rows."""
    described: dict[str, Any] = {"kind": "hidden" if name in known.hidden else "tensor", "name": name}
    if name in known.trim:
        described["trim"] = known.trim[name].to_dict()
    if rows is not None:
        described["detections"] = rows["rows"] != "count"
        described.update({k: names[v] if k == "rank_key" else v for k, v in rows.items()})
    return described


def _scalar_type(node: torch.fx.Node) -> str:
    value = node.meta.get("val")
    if isinstance(value, (torch.SymBool, bool)):
        return "bool"
    if isinstance(value, (torch.SymFloat, float)):
        return "float"
    return "int"


def _as_tensor(gm: torch.fx.GraphModule, node: torch.fx.Node) -> torch.fx.Node:
    dtype = {"bool": torch.bool, "float": torch.float32, "int": torch.int64}[_scalar_type(node)]
    tensor = gm.graph.call_function(torch.ops.aten.scalar_tensor.default, (node,), {"dtype": dtype})
    tensor.meta["val"] = torch.empty((), dtype=dtype)
    return tensor
