"""Make every graph output a named tensor.

torch.export already flattens lists, tuples, dicts and dataclasses into leaves; what reaches here
can still hold Python constants (None, 3, "xyxy") and symbolic ints (``x.shape[0]``). Engines
return only tensors, so constants leave the graph and are recorded for the host to put back,
and symbolic ints become 0-d int64 tensors that the host turns back into ints.
"""

from __future__ import annotations

from typing import Any

import torch

from fxdeploy.ops.names import is_nms
from fxdeploy.passes.base import PassResult
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
    after_nms = _nms_descendants(gm)
    modified = False
    for leaf, name in zip(leaves, names, strict=True):
        if isinstance(leaf, torch.fx.Node) and isinstance(leaf.meta.get("val"), torch.Tensor):
            rows_dim = _rows_dim(leaf.meta["val"], after_nms[leaf]) if leaf in after_nms else None
            described.append(_tensor_leaf(name, known, leaf in after_nms, rows_dim))
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


def _nms_descendants(gm: torch.fx.GraphModule) -> dict[torch.fx.Node, int | None]:
    """Nodes computed from an NMS result (their row order is only defined up to score ties), each
    with its NMS's row count K (``keep_top_k``), where that is static. A node after several NMS
    calls (a two-stage detector's proposals, then its detections) takes the last one's K."""
    found: dict[torch.fx.Node, int | None] = {}
    for nms in reversed(gm.graph.nodes):
        if not is_nms(nms):
            continue
        val = nms.meta.get("val")
        first = val[0] if isinstance(val, (list, tuple)) and val else val
        shape = getattr(first, "shape", ())
        rows = shape[1] if len(shape) >= 2 and isinstance(shape[1], int) else None
        frontier = [nms]
        while frontier:
            node = frontier.pop()
            if node not in found:
                found[node] = rows
                frontier.extend(node.users)
    return found


def _rows_dim(value: torch.Tensor, rows: int | None) -> int | None:
    """The dim that indexes detection rows: [B, K, ...] gives 1, one image's [K, ...] gives 0."""
    if rows is None:
        return None
    return next((d for d, size in enumerate(value.shape) if isinstance(size, int) and size == rows), None)


def _tensor_leaf(name: str, known: GraphRecord, detections: bool, rows_dim: int | None) -> dict[str, Any]:
    leaf: dict[str, Any] = {"kind": "hidden" if name in known.hidden else "tensor", "name": name}
    if detections:
        leaf["detections"] = True
    if rows_dim is not None:
        leaf["rows_dim"] = rows_dim
    if name in known.trim:
        leaf["trim"] = known.trim[name].to_dict()
    return leaf


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
