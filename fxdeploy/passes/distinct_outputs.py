"""Every output of an ONNX graph its own value: an input returned as it is (``return x``), or one
value returned twice (``return v, v``), gets a copy.

An ONNX graph output is a named value, and the exporter names each output by renaming the value
that holds it: an input returned became an output that was also an input ("Required inputs
['output_orig'] are missing" on ONNX Runtime), and a value returned twice kept only its last name
("Invalid output name: 0"). A copy (``clone``, an Identity) gives each output a value of its own;
the values are the same, so the outputs are.
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.settings import Settings

aten = torch.ops.aten


def distinct_outputs(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    output = next(n for n in gm.graph.nodes if n.op == "output")
    leaves = list(output.args[0]) if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
    seen: set[torch.fx.Node] = set()
    modified = False
    for index, leaf in enumerate(leaves):
        if check(leaf, seen) is None:
            with gm.graph.inserting_before(output):
                copy = gm.graph.call_function(aten.clone.default, (leaf,))
            copy.meta.update(leaf.meta)
            leaves[index], modified = copy, True
        elif isinstance(leaf, torch.fx.Node):
            seen.add(leaf)
    if modified:
        output.args = (tuple(leaves),)
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def check(leaf: object, seen: set[torch.fx.Node]) -> str | None:
    """None when the output ``leaf`` needs a copy, else why not."""
    if not isinstance(leaf, torch.fx.Node) or not isinstance(leaf.meta.get("val"), torch.Tensor):
        return "not a tensor"
    if leaf.op == "placeholder":
        return None
    if leaf in seen:
        return None
    return "a value of its own, returned once"
