"""A float32 tensor's ``+``, ``-``, ``*`` or ``/`` by a run-time size, with the size made a tensor.

Normalizing coordinates by the image's size (``x / (h - 1)``) divides a tensor by a number computed
from a dynamic dim. pnnx fuses it into one ``pnnx.Expression`` (``div(@0,sub(size(@0,2),1))``), and
ncnn has no layer that reads a blob's size into arithmetic, so pnnx leaves the expression
unconverted and lower() refused the graph. As a tensor of ones' shape filled with the size, it is
made from sizes alone: the cut (``partition.host_nodes``) makes it on the host at each call, and the
engine takes it as an input and divides by it (ncnn's BinaryOp, broadcast).

Exact: PyTorch computes a float32 tensor's arithmetic with a number in float32, the number cast to
it first, which is the float32 value the filled tensor holds; a ones' shape of the tensor's rank
broadcasts to the tensor's own shape, so the result has its shape and dtype:

    x / s == x / full([1] * x.dim(), s, dtype=float32)

Fires on ``aten.add/sub/mul/div.Tensor`` of a float32 tensor of rank 1 or more and a symbolic size
(a ``SymInt`` or ``SymFloat``) as the second operand; a division with a rounding mode stays.
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import replaced_by
from fxdeploy.settings import Settings

aten = torch.ops.aten
_ARITHMETIC = (aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor)


def size_operands(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    graph = gm.graph
    for node in list(graph.nodes):
        if check(node) is not None:
            continue
        x, size = node.args[:2]
        value = x.meta["val"]
        with graph.inserting_before(node):
            filled = graph.call_function(
                aten.full.default, ([1] * value.dim(), size), {"dtype": torch.float32, "device": value.device})
            new = [filled, graph.call_function(node.target, (x, filled, *node.args[2:]), dict(node.kwargs))]
        replaced_by(new, node)
        node.replace_all_uses_with(new[-1])
        graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def check(node: torch.fx.Node) -> str | None:
    """None when ``node`` adds, subtracts, multiplies or divides a float32 tensor of rank 1 or more by
    a symbolic size; else why not."""
    if node.op != "call_function" or node.target not in _ARITHMETIC or len(node.args) < 2:  # noqa: PLR2004
        return "not a tensor's +, -, * or / (without a rounding mode)"
    x, size = node.args[:2]
    value = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor) or value.dtype != torch.float32 or value.dim() == 0:
        return "its first operand is not a float32 tensor of rank 1 or more"
    if not isinstance(size, torch.fx.Node) or not isinstance(size.meta.get("val"), (torch.SymInt, torch.SymFloat)):
        return "its second operand is not a run-time size"
    return None
