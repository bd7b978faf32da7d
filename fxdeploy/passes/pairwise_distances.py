"""``torch.cdist`` spelt with broadcast differences, on the ONNX targets.

torch.onnx decomposes ``aten.cdist`` to ``aten._cdist_forward``, which it has no translation for,
so a model comparing embeddings with prototypes (``-torch.cdist(features, centers)``) was refused.
The distance between rows ``a`` of ``x1`` and ``b`` of ``x2`` is, from ``d = |a - b|``:
``sqrt(sum(d^2))`` at p = 2, ``sum(d)`` at p = 1, ``max(d)`` at p = inf, the count of nonzero ``d``
at p = 0, and ``sum(d^p)^(1/p)`` otherwise. torch's own kernel computes the same sums (at p = 2,
for more than 25 rows, by a matrix product, which rounds differently: within float32's rounding of
the squared norms). The broadcast holds ``rows1 x rows2 x features`` values, so where its static
sizes alone make more than ``MAX_ELEMENTS``, the cdist is left as it is.
"""

from __future__ import annotations

import math

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import replaced_by
from fxdeploy.settings import Settings

aten = torch.ops.aten
CDIST = (aten.cdist.default, aten._cdist_forward.default)
MAX_ELEMENTS = 2**24


def pairwise_distances(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    graph = gm.graph
    for node in list(graph.nodes):
        if check(node) is not None:
            continue
        x1, x2, p = node.args[0], node.args[1], float(node.args[2]) if len(node.args) > 2 else 2.0
        with graph.inserting_before(node):
            new = [graph.call_function(aten.unsqueeze.default, (x1, -2)),  # [..., P, 1, M]
                   graph.call_function(aten.unsqueeze.default, (x2, -3))]  # [..., 1, R, M]
            new.append(graph.call_function(aten.sub.Tensor, (new[0], new[1])))
            new.append(graph.call_function(aten.abs.default, (new[-1],)))
            new += _norm(graph, new[-1], p, x1.meta["val"].dtype)
        replaced_by(new, node)
        node.replace_all_uses_with(new[-1])
        graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def check(node: torch.fx.Node) -> str | None:
    """None when ``node`` is a cdist of float rows whose broadcast is small enough, else why it stays."""
    if node.op != "call_function" or node.target not in CDIST:
        return "not aten.cdist"
    x1, x2 = (a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in node.args[:2])
    if not isinstance(x1, torch.Tensor) or not isinstance(x2, torch.Tensor) or not x1.is_floating_point():
        return "no float inputs recorded"
    p = float(node.args[2]) if len(node.args) > 2 else 2.0
    if p < 0 or math.isnan(p):
        return f"p={p} is not a norm"
    sizes = [x1.shape[-2], x2.shape[-2], x1.shape[-1], *torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2])]
    if math.prod(s for s in sizes if isinstance(s, int)) > MAX_ELEMENTS:
        return f"the broadcast {sizes} holds more than {MAX_ELEMENTS} values"
    return None


def _norm(graph: torch.fx.Graph, d: torch.fx.Node, p: float, dtype: torch.dtype) -> list[torch.fx.Node]:
    if p == math.inf:
        return [graph.call_function(aten.amax.default, (d, [-1]))]
    if p == 0:
        nonzero = graph.call_function(aten.ne.Scalar, (d, 0))
        return [nonzero, graph.call_function(aten.sum.dim_IntList, (nonzero, [-1]), {"dtype": dtype})]
    if p == 1:
        return [graph.call_function(aten.sum.dim_IntList, (d, [-1]))]
    squares = p == 2
    power = graph.call_function(*((aten.mul.Tensor, (d, d)) if squares else (aten.pow.Tensor_Scalar, (d, p))))
    total = graph.call_function(aten.sum.dim_IntList, (power, [-1]))
    if p == 2:
        return [power, total, graph.call_function(aten.sqrt.default, (total,))]
    return [power, total, graph.call_function(aten.pow.Tensor_Scalar, (total, 1 / p))]
