"""A tensor's arithmetic or comparison with a run-time size, with the size made a tensor.

Normalizing coordinates by the image's size (``x / (h - 1)``) divides a tensor by a number computed
from a dynamic dim. pnnx fuses it into one ``pnnx.Expression`` (``div(@0,sub(size(@0,2),1))``), and
ncnn has no layer that reads a blob's size into arithmetic, so pnnx leaves the expression
unconverted and lower() refused the graph. Where the op takes the number as a ``Scalar``
(``(w - 1) - x`` is ``rsub.Scalar``, ``idx % w`` ``remainder.Scalar``, ``x > h`` ``gt.Scalar``),
torch.jit.trace hands it the size as a tensor, and the trace itself failed ("Expected a value of type
'number'"). As a tensor filled with the size, of the tensor's dim 0 (the batch) and then ones, it
is made from sizes alone: the cut (``partition.host_nodes``) makes it on the host at each call, and
the engine takes it as a per-image input (a shape of ones only would be taken whole by every image,
with ncnn's leading 1: a per-image 4-D operand became a 5-D blob, and a graph with two such sizes
was refused).

Exact: PyTorch computes a tensor's op with a number by wrapping the number into a tensor
(``remainder.Scalar``, ``rsub.Scalar`` call the ``.Tensor`` op so) whose value is cast to the
tensor's dtype; the filled tensor holds that value in that dtype, and a shape of the tensor's rank,
its dim 0 and ones, broadcasts to the tensor's own shape (of a 0-d tensor, a 0-d one, which promotes
as the number does), so the result has its shape, dtype and values:

    x / s == x / full([x.shape[0], 1, ...], s, dtype=x.dtype)      x % s == remainder(x, full(...))

Fires where the tensor is float32 (the size a ``SymInt`` or ``SymFloat``) or int64 or int32 (the
size a ``SymInt``: exact in it), and the size is the second operand of ``+``,
``-``, ``*``, ``/`` (without a rounding mode), ``rsub``, ``%`` or a comparison. A power stays: its
number exponent has kernels of its own (``x ** 2`` is ``x * x``), which the tensor exponent has not.
"""

from __future__ import annotations

from typing import Any

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import replaced_by
from fxdeploy.settings import Settings

aten = torch.ops.aten
_AS_TENSOR = {
    aten.add.Tensor: aten.add.Tensor, aten.sub.Tensor: aten.sub.Tensor, aten.mul.Tensor: aten.mul.Tensor,
    aten.div.Tensor: aten.div.Tensor, aten.rsub.Scalar: aten.rsub.Tensor, aten.remainder.Scalar: aten.remainder.Tensor,
    aten.gt.Scalar: aten.gt.Tensor, aten.ge.Scalar: aten.ge.Tensor, aten.lt.Scalar: aten.lt.Tensor,
    aten.le.Scalar: aten.le.Tensor, aten.eq.Scalar: aten.eq.Tensor, aten.ne.Scalar: aten.ne.Tensor,
}
"""The op -> the op that takes the size as a tensor (the same op where it takes a tensor already)."""
_EXACT = {torch.float32: (torch.SymInt, torch.SymFloat), torch.int64: (torch.SymInt,), torch.int32: (torch.SymInt,)}
"""The tensor's dtype -> the sizes its dtype holds as PyTorch casts them."""


def size_operands(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    graph = gm.graph
    for node in list(graph.nodes):
        if check(node) is not None:
            continue
        x, size = node.args[:2]
        value = x.meta["val"]
        with graph.inserting_before(node):
            shape, new = _shape(graph, x, value)
            options = {"dtype": value.dtype, "device": value.device}
            filled = graph.call_function(aten.full.default, (shape, size), options)
            op = _AS_TENSOR[node.target]
            new += [filled, graph.call_function(op, (x, filled, *node.args[2:]), dict(node.kwargs))]
        replaced_by(new, node)
        node.replace_all_uses_with(new[-1])
        graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def _shape(graph: torch.fx.Graph, x: torch.fx.Node, value: torch.Tensor) -> tuple[list[Any], list[torch.fx.Node]]:
    """The filled tensor's shape, ``x``'s dim 0 then ones, and the size read it takes (if any)."""
    if value.dim() == 0:
        return [], []
    ones, first = [1] * (value.dim() - 1), value.shape[0]
    if not isinstance(first, torch.SymInt):
        return [int(first), *ones], []
    # read off a graph input where one has that size (the batch): a read off x would wait for x's engine
    inputs = [(n, d) for n in graph.nodes if n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor)
              for d, size in enumerate(n.meta["val"].shape) if isinstance(size, torch.SymInt)
              and size.node.expr == first.node.expr]
    read = graph.call_function(aten.sym_size.int, inputs[0] if inputs else (x, 0))
    return [read, *ones], [read]


def check(node: torch.fx.Node) -> str | None:
    """None when ``node`` is an arithmetic or comparison of a float32, int64 or int32 tensor with a
    run-time size its dtype holds exactly, as its second operand; else why not."""
    if node.op != "call_function" or node.target not in _AS_TENSOR or len(node.args) < 2:  # noqa: PLR2004
        return "not a tensor's arithmetic (+, -, *, / without a rounding mode, rsub, %) or comparison"
    x, size = node.args[:2]
    value = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor) or value.dtype not in _EXACT:
        return "its first operand is not a float32, int64 or int32 tensor"
    number = size.meta.get("val") if isinstance(size, torch.fx.Node) else None
    if not isinstance(number, (torch.SymInt, torch.SymFloat)):
        return "its second operand is not a run-time size"
    if not isinstance(number, _EXACT[value.dtype]):
        return f"a {type(number).__name__} operand is cast to {value.dtype} otherwise than a filled tensor holds it"
    return None
