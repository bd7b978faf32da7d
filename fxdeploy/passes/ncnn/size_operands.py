"""A tensor's arithmetic or comparison with a run-time size, with the size made a tensor.

Normalizing coordinates by the image's size (``x / (h - 1)``) divides a tensor by a number computed
from a dynamic dim. pnnx fuses it into one ``pnnx.Expression`` (``div(@0,sub(size(@0,2),1))``), and
ncnn has no layer that reads a blob's size into arithmetic, so pnnx leaves the expression
unconverted and lower() refused the graph. Where the op takes the number as a ``Scalar``
(``(w - 1) - x`` is ``rsub.Scalar``, ``idx % w`` ``remainder.Scalar``, ``x > h`` ``gt.Scalar``),
torch.jit.trace hands it the size as a tensor, and the trace itself failed ("Expected a value of type
'number'"). As a tensor of ones' shape filled with the size, it is made from sizes alone: the cut
(``partition.host_nodes``) makes it on the host at each call, and the engine takes it as an input.

Exact: PyTorch computes a tensor's op with a number by wrapping the number into a tensor
(``remainder.Scalar``, ``rsub.Scalar`` call the ``.Tensor`` op so) whose value is cast to the
tensor's dtype; the filled tensor holds that value in that dtype, and a ones' shape of the tensor's
rank broadcasts to the tensor's own shape (of a 0-d tensor, a 0-d one, which promotes as the number
does), so the result has its shape, dtype and values:

    x / s == x / full([1] * x.dim(), s, dtype=x.dtype)        x % s == remainder(x, full(...))

Fires where the tensor is float32 (the size a ``SymInt`` or ``SymFloat``) or int64 or int32 (the
size a ``SymInt``: exact in it), and the size is the second operand of ``+``,
``-``, ``*``, ``/`` (without a rounding mode), ``rsub``, ``%`` or a comparison. A power stays: its
number exponent has kernels of its own (``x ** 2`` is ``x * x``), which the tensor exponent has not.
"""

from __future__ import annotations

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
            filled = graph.call_function(
                aten.full.default, ([1] * value.dim(), size), {"dtype": value.dtype, "device": value.device})
            op = _AS_TENSOR[node.target]
            new = [filled, graph.call_function(op, (x, filled, *node.args[2:]), dict(node.kwargs))]
        replaced_by(new, node)
        node.replace_all_uses_with(new[-1])
        graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


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
