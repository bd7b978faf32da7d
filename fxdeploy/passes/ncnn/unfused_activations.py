"""Spell softsign, tanhshrink and softmin so that pnnx does not fuse them into layers ncnn lacks.

``F.softsign(x)`` is exported as ``x / (|x| + 1)``, ``F.tanhshrink(x)`` as ``x - tanh(x)`` and
``F.softmin(x, d)`` as ``softmax(-x, d)``. pnnx recognizes each pattern and writes one
``F.softsign``, ``F.tanhshrink`` or ``F.softmin`` layer, which ncnn has no layer for; with no graph
node behind the fused layer, the host fallback could not take it either, and lower() refused the
model. The same values, spelled with an operation pnnx's patterns do not name:

    |x| + 1     ->  |x| - (-1)          x - tanh(x)  ->  x + (-tanh(x))          -x  ->  x * -1

Bit for bit: IEEE 754 defines ``a - b`` as ``a + (-b)`` (negation is exact), and a product by -1 is
the negation itself (signed zeros and NaNs included). Fires only where the pattern pnnx fuses is
there: the ``|x| + 1`` a division of ``x`` reads, the ``tanh(x)`` subtracted from ``x``, the ``-x`` a
softmax reads.
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import replaced_by
from fxdeploy.settings import Settings

aten = torch.ops.aten
Node = torch.fx.Node
_SOFTMAX = (aten.softmax.int, aten._softmax.default)


def unfused_activations(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        form = check(node)
        if form is None:
            continue
        source = node.args[0]
        with gm.graph.inserting_before(node):
            if form == "softsign":
                new = [gm.graph.call_function(aten.sub.Tensor, (source, -1))]
            elif form == "tanhshrink":
                negated = gm.graph.call_function(aten.neg.default, (node.args[1],))
                new = [negated, gm.graph.call_function(aten.add.Tensor, (source, negated))]
            else:
                new = [gm.graph.call_function(aten.mul.Tensor, (source, -1.0))]
        replaced_by(new, node)
        node.replace_all_uses_with(new[-1])
        gm.graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def check(node: Node) -> str | None:
    """The pattern pnnx would fuse that ``node`` is part of ('softsign': the ``|x| + 1``,
    'tanhshrink': the ``x - tanh(x)``, 'softmin': the ``-x``); None where it is none of them."""
    if node.op != "call_function" or node.kwargs or not _float32(node):
        return None
    args = node.args
    if node.target is aten.add.Tensor and args[1:] == (1,) and _is(args[0], aten.abs.default):
        x = args[0].args[0]
        if any(u.target is aten.div.Tensor and u.args[0] is x and u.args[1] is node for u in node.users):
            return "softsign"
    if node.target is aten.sub.Tensor and len(args) == 2 and _is(args[1], aten.tanh.default):  # noqa: PLR2004
        return "tanhshrink" if args[1].args[0] is args[0] else None
    if node.target is aten.neg.default and any(u.target in _SOFTMAX and u.args[0] is node for u in node.users):
        return "softmin"
    return None


def _is(value: object, target: object) -> bool:
    return isinstance(value, Node) and value.op == "call_function" and value.target is target


def _float32(node: Node) -> bool:
    value = node.meta.get("val")
    return isinstance(value, torch.Tensor) and value.dtype == torch.float32
