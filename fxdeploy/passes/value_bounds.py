"""Bounds on a graph's values that hold for every input: for rewrites that are exact only where a
value is finite.

``|value| <= bound`` whatever the graph's inputs, where a bound is known: a sigmoid's output is
within 1 (sigmoid(inf) is 1), a clamp's within its bounds, a finite constant within its largest
magnitude, and views, pooling, max/min and sums and products of bounded values within what their
operands give. NaN is the exception: a NaN input stays NaN through all of them (the bound says
the value is never infinite, not that it is a number). A value with no known bound is None.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import torch

from fxdeploy.passes.graph_utils import attribute

aten = torch.ops.aten
Node = torch.fx.Node

LARGEST = 1e37
"""Bounds past this are dropped: float32 holds up to 3.4e38, and a sum of two values near it overflows."""
_UNIT = frozenset({
    aten.sigmoid.default, aten.tanh.default, aten._softmax.default, aten.softmax.int, aten.hardsigmoid.default,
    aten.erf.default, aten.sin.default, aten.cos.default,
})
"""Ops whose result is within 1 of 0 for every input."""
_SAME = frozenset({
    aten.max_pool2d.default, aten.max_pool1d.default, aten.amax.default, aten.amin.default, aten.neg.default,
    aten.abs.default, aten.relu.default, aten.select.int, aten.slice.Tensor, aten.view.default,
    aten.reshape.default, aten._unsafe_view.default, aten.permute.default, aten.expand.default,
    aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.flatten.using_ints,
    aten.clone.default, aten.alias.default, aten.transpose.int, aten.t.default, aten.constant_pad_nd.default,
})
"""Ops whose result holds values of their first operand (negated or as magnitudes) or values no
larger: pooling and max/min pick among them; a pad adds its fill (checked separately)."""


def value_bounds(gm: torch.fx.GraphModule) -> dict[Node, float]:
    """The known bound on the magnitude of every node's values, in one pass in graph order."""
    bounds: dict[Node, float] = {}
    for node in gm.graph.nodes:
        bound = _bound(gm, node, bounds)
        if bound is not None and bound <= LARGEST:
            bounds[node] = bound
    return bounds


def operand_bound(operand: Any, bounds: dict[Node, float]) -> float | None:
    """The bound of an op's operand: a node's, or a Python number's own magnitude."""
    if isinstance(operand, Node):
        return bounds.get(operand)
    if isinstance(operand, int | float) and not isinstance(operand, bool) and math.isfinite(operand):
        return abs(float(operand))
    return None


def _bound(gm: torch.fx.GraphModule, node: Node, bounds: dict[Node, float]) -> float | None:
    if node.op == "get_attr":
        return _constant_bound(attribute(gm, node))
    if node.op != "call_function":
        return None
    target, args = node.target, node.args
    operands = [operand_bound(a, bounds) for a in args[:2]]
    if target in _UNIT:
        return 1.0
    if target in _SAME:
        extra = operand_bound(args[2], bounds) if target is aten.constant_pad_nd.default and len(args) > 2 else 0.0
        return None if operands[0] is None or extra is None else max(operands[0], extra)
    if target is aten.clamp.default and len(args) == 3:
        low, high = operand_bound(args[1], bounds), operand_bound(args[2], bounds)
        return None if low is None or high is None else max(low, high)
    if target is operator.getitem and isinstance(args[0], Node) and args[1] == 0:
        return bounds.get(args[0]) if args[0].target in (aten.max.dim, aten.min.dim) else None
    if target in (aten.max.dim, aten.min.dim, aten.maximum.default, aten.minimum.default, aten.where.self):
        values = operands if target is not aten.where.self else [operand_bound(a, bounds) for a in args[1:3]]
        values = values if target not in (aten.max.dim, aten.min.dim) else values[:1]
        return None if None in values else max(values)  # type: ignore[type-var]
    if target in (aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor) and len(args) == 2:
        if None in operands:
            return None
        first, second = operands
        return first * second if target is aten.mul.Tensor else first + second  # type: ignore[operator]
    if target is aten.cat.default:
        pieces = [bounds.get(piece) for piece in args[0]]
        return None if None in pieces or not pieces else max(pieces)  # type: ignore[type-var]
    return None


def _constant_bound(value: Any) -> float | None:
    if not isinstance(value, torch.Tensor) or not value.dtype.is_floating_point or value.numel() == 0:
        return None
    largest = value.detach().abs().max().item()
    return largest if math.isfinite(largest) else None
