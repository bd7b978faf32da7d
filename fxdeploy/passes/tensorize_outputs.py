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
from fxdeploy.settings import Settings

OUTPUT_NAMES = "fxdeploy.output_names"
OUTPUT_LEAVES = "fxdeploy.output_leaves"
HIDDEN = "fxdeploy.hidden_outputs"
"""Outputs a pass added for the host's use (e.g. NMS counts); not part of the model's structure."""
TRIM = "fxdeploy.trim"
"""{output name: {"dim": d, "count": hidden output name}}: padded outputs the host slices."""
_CONSTANT_TYPES = (type(None), bool, int, float, str)


def tensorize_outputs(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    output = next(n for n in gm.graph.nodes if n.op == "output")
    leaves = list(output.args[0]) if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
    names = list(gm.meta.get(OUTPUT_NAMES) or [f"output_{i}" for i in range(len(leaves))])
    if len(names) != len(leaves):
        raise ValueError(f"{len(names)} output names for {len(leaves)} graph outputs")
    described: list[dict[str, Any]] = []
    kept: list[torch.fx.Node] = []
    after_nms = _nms_descendants(gm)
    modified = False
    for leaf, name in zip(leaves, names, strict=True):
        if isinstance(leaf, torch.fx.Node) and isinstance(leaf.meta.get("val"), torch.Tensor):
            described.append(_tensor_leaf(name, gm.meta, leaf in after_nms))
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
    gm.meta[OUTPUT_LEAVES] = described
    return PassResult(gm, modified)


def _nms_descendants(gm: torch.fx.GraphModule) -> set[torch.fx.Node]:
    """Nodes computed from an NMS result: their row order is only defined up to score ties."""
    frontier = [n for n in gm.graph.nodes if str(n.target).startswith("fxdeploy.") and "nms" in str(n.target)]
    seen: set[torch.fx.Node] = set()
    while frontier:
        node = frontier.pop()
        if node not in seen:
            seen.add(node)
            frontier.extend(node.users)
    return seen


def _tensor_leaf(name: str, meta: dict[str, Any], detections: bool) -> dict[str, Any]:
    leaf: dict[str, Any] = {"kind": "hidden" if name in meta.get(HIDDEN, ()) else "tensor", "name": name}
    if detections:
        leaf["detections"] = True
    if name in meta.get(TRIM, {}):
        leaf["trim"] = dict(meta[TRIM][name])
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
