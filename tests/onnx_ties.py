"""An ONNX file as a runtime whose TopK orders equal values its own way would run it.

ONNX's TopK keeps equal values in index order, and ONNX Runtime's CPU provider does so; its CUDA
provider and TensorRT do not promise it. ``reversed_ties`` rewrites every TopK of the main graph to
order ties by the *higher* index (a TopK of the axis reversed, its indices mapped back): run on
ONNX Runtime's CPU provider, the file then gives what such a runtime could. A graph whose result
does not depend on TopK's tie order gives the same outputs either way.
"""

from __future__ import annotations

import copy

import numpy as np
import onnx
from onnx import helper, numpy_helper


def reversed_ties(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose TopKs break ties by the higher index. Returns it with the count of
    TopKs rewritten in ``model.doc_string``."""
    out = copy.deepcopy(model)
    nodes, rewritten = [], 0
    for i, node in enumerate(out.graph.node):
        if node.op_type != "TopK":
            nodes.append(node)
            continue
        rewritten += 1
        axis = next((a.i for a in node.attribute if a.name == "axis"), -1)
        p = f"_ties{i}"
        x, k = node.input[0], node.input[1]
        nodes += [
            _constant(f"{p}_minus1", np.array([-1], np.int64)),
            _constant(f"{p}_end", np.array([np.iinfo(np.int64).min], np.int64)),
            _constant(f"{p}_axes", np.array([axis], np.int64)),
            _constant(f"{p}_axis", np.array(axis, np.int64)),
            _constant(f"{p}_one", np.array(1, np.int64)),
            helper.make_node("Slice", [x, f"{p}_minus1", f"{p}_end", f"{p}_axes", f"{p}_minus1"], [f"{p}_rev"]),
            helper.make_node("TopK", [f"{p}_rev", k], [node.output[0], f"{p}_idx"], name=f"{p}_topk",
                             **{a.name: helper.get_attribute_value(a) for a in node.attribute}),
        ]
        if len(node.output) > 1 and node.output[1]:
            nodes += [
                helper.make_node("Shape", [x], [f"{p}_shape"]),
                helper.make_node("Gather", [f"{p}_shape", f"{p}_axis"], [f"{p}_n"], axis=0),
                helper.make_node("Sub", [f"{p}_n", f"{p}_one"], [f"{p}_last"]),
                helper.make_node("Sub", [f"{p}_last", f"{p}_idx"], [node.output[1]]),
            ]
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    out.doc_string = str(rewritten)
    return out


def _constant(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value))
