"""A size's floor division whose dividend can be negative, with the dividend made non-negative first.

Size arithmetic such as ``-(-h // 4)`` (the ceiling of ``h / 4``) divides a negative size. Python
floors, to ``-17`` for ``-65 // 4``; ncnn's size expressions (pnnx's, from the traced ``//``)
truncate toward zero, to ``-16``. Where the divisor divides the size, as at the example and at the
min, opt and max sizes people pick (multiples of 32), both agree: lower()'s check passes, and the
artifact slices one row more than eager at the other sizes. (The ONNX targets translate a size's
``//`` themselves, ``lowering/onnx_translations/division.py``: torch.onnx exports the graph again,
and the shape environment would simplify this rewrite back to ``a // b``.)

With a divisor ``b >= 1``, ``a // b == (a + k*b) // b - k`` for any integer ``k``.
``k = ceil(-min(a) / min(b))`` makes ``a + k*b`` non-negative at every size of the declared ranges
(the shape environment's bounds on the dividend and the divisor), where truncation is the floor. A
dividend that is never negative, or whose lower bound is unknown, or a divisor not known to be
positive, is left as it is (``check`` says why).
"""

from __future__ import annotations

import math
import operator

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import replaced_by
from fxdeploy.settings import Settings


def size_floor_divisions(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    graph = gm.graph
    for node in list(graph.nodes):
        if check(node) is not None:
            continue
        dividend, divisor = node.args
        k = _shift(node)
        with graph.inserting_before(node):
            if isinstance(divisor, torch.fx.Node):
                new = [graph.call_function(operator.mul, (k, divisor))]
                new.append(graph.call_function(operator.add, (dividend, new[-1])))
            else:
                new = [graph.call_function(operator.add, (dividend, k * divisor))]
            new.append(graph.call_function(operator.floordiv, (new[-1], divisor)))
            new.append(graph.call_function(operator.sub, (new[-1], k)))
        replaced_by(new, node)
        node.replace_all_uses_with(new[-1])
        graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def check(node: torch.fx.Node) -> str | None:
    """None when ``node`` is a size's ``//`` whose dividend is negative at some size of the declared
    ranges, with a known lower bound, and whose divisor is at least 1 at every size; else why not."""
    if node.op != "call_function" or node.target is not operator.floordiv or len(node.args) != 2:
        return "not a size's //"
    if not isinstance(node.meta.get("val"), torch.SymInt):
        return "not a symbolic int (a tensor's // is aten.floor_divide or aten.div)"
    low = _lower_bound(node.args[0])
    if low is None:
        return "the dividend's lower bound is unknown: no shift makes it non-negative"
    if low >= 0:
        return "the dividend is never negative: truncation is the floor"
    divisor_low = _lower_bound(node.args[1])
    if divisor_low is None or divisor_low < 1:
        return "the divisor is not known to be positive"
    return None


def _shift(node: torch.fx.Node) -> int:
    """The least ``k >= 0`` with ``a + k*b >= 0`` wherever ``a >= min(a)`` and ``b >= min(b) >= 1``."""
    low, divisor_low = _lower_bound(node.args[0]), _lower_bound(node.args[1])
    assert low is not None and divisor_low is not None  # check() found both
    return -(low // divisor_low)


def _lower_bound(value: object) -> int | None:
    """The least value of an int, or of a node's symbolic int over the declared ranges; None where
    unknown (unbounded, or not an integer)."""
    if isinstance(value, torch.fx.Node):
        value = value.meta.get("val")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not isinstance(value, torch.SymInt):
        return None
    lower = value.node.shape_env.bound_sympy(value.node.expr).lower
    try:
        return int(lower) if math.isfinite(float(lower)) else None
    except (TypeError, ValueError):
        return None
