"""An int32 index of advanced indexing is widened to int64 before the exporter sees it.

torch indexes with any integer tensor: ``x[:, ids]`` and ``x[rows, ids]`` with ``ids`` int32 (ids
read from a file, ``argmax().int()``, a tokenizer's output) are eager code. torch.onnx's translation
of ``aten.index`` passes the index on as it is: ``x[:, ids]`` was a ``GatherND`` on int32 indices,
which ONNX allows int64 only for, and ``x[rows, ids]`` a ``Max`` of an int64 and an int32 shape;
ONNX Runtime refused to load either model ("fxdeploy did not expect this failure") and OpenVINO
the second. A cast to int64 changes no index, so the result is eager's. uint8 and bool indices are
masks, not positions, and stay.
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import fill_meta
from fxdeploy.settings import Settings

aten = torch.ops.aten
INDEXING = frozenset({
    aten.index.Tensor, aten._unsafe_index.Tensor, aten.index_put.default, aten._unsafe_index_put.default,
})
NARROW = frozenset({torch.int32})  # torch indexes with int64, int32, and uint8 or bool masks


def wide_indices(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if check(node) is not None:
            continue
        indices = list(node.args[1])
        for position, index in enumerate(indices):
            if _dtype(index) in NARROW:
                with gm.graph.inserting_before(node):
                    indices[position] = gm.graph.call_function(aten._to_copy.default, (index,), {"dtype": torch.int64})
                fill_meta([indices[position]])
        node.args = (node.args[0], indices, *node.args[2:])
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def check(node: torch.fx.Node) -> str | None:
    """None where ``node`` indexes with an int32 tensor; else why not."""
    if node.op != "call_function" or node.target not in INDEXING:
        return "not advanced indexing"
    if not any(_dtype(index) in NARROW for index in node.args[1]):
        return "every index is int64, or a mask"
    return None


def _dtype(arg: object) -> torch.dtype | None:
    value = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    return value.dtype if isinstance(value, torch.Tensor) else None
