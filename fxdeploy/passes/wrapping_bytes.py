"""Byte arithmetic that wraps, as torch's does, on OpenVINO.

torch computes ``uint8`` and ``int8`` ``+``, ``-``, ``*`` and negation modulo 256 (``uint8(200) +
100`` is 44); OpenVINO's CPU plugin saturates them (255), so lower()'s check refused the artifact
wherever the example wrapped. The op runs in int32 instead: int32 arithmetic wraps modulo 2**32, a
multiple of 256, so every result keeps its residue modulo 256, whatever the operands (a scalar or
a 0-d tensor past the byte's range included). A bitwise and brings it into the byte's range
(``int8``: of ``v + 128``, less 128) before the cast back, which then has nothing to saturate.
Exact for every input (``tests/passes/test_wrapping_bytes.py`` runs all 65,536 pairs).
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import replaced_by
from fxdeploy.settings import Settings

aten = torch.ops.aten
OPS = frozenset({
    aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar, aten.rsub.Tensor, aten.rsub.Scalar,
    aten.mul.Tensor, aten.mul.Scalar, aten.neg.default,
})
BYTES = (torch.uint8, torch.int8)


def wrapping_bytes(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if check(node) is None:
            _replace(gm.graph, node)
            modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def check(node: torch.fx.Node) -> str | None:
    """None when ``node`` is byte arithmetic that can wrap, else why it is left alone."""
    if node.op != "call_function" or node.target not in OPS:
        return "not an add, sub, mul or neg"
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor) or value.dtype not in BYTES:
        return "its result is not uint8 or int8"
    return None


def _replace(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    dtype = node.meta["val"].dtype
    new: list[torch.fx.Node] = []

    def widened(arg: object) -> object:
        if not isinstance(arg, torch.fx.Node) or not isinstance(arg.meta.get("val"), torch.Tensor):
            return arg
        new.append(graph.call_function(aten._to_copy.default, (arg,), {"dtype": torch.int32}))
        return new[-1]

    with graph.inserting_before(node):
        args = tuple(widened(a) for a in node.args)
        new.append(graph.call_function(node.target, args, dict(node.kwargs)))
        if dtype == torch.int8:
            new.append(graph.call_function(aten.add.Tensor, (new[-1], 128)))
        new.append(graph.call_function(aten.bitwise_and.Scalar, (new[-1], 255)))
        if dtype == torch.int8:
            new.append(graph.call_function(aten.sub.Tensor, (new[-1], 128)))
        new.append(graph.call_function(aten._to_copy.default, (new[-1],), {"dtype": dtype}))
    replaced_by(new, node)
    node.replace_all_uses_with(new[-1])
    graph.erase_node(node)
