"""A select between booleans is spelt with ``and``, ``or`` and ``not``.

ONNX Runtime's CPU provider has no ``Where`` kernel for bool: ``torch.where(valid, mask, False)``,
``torch.where(peaks > 0, True, False)`` and ``mask.masked_fill(ignore, True)``, everyday mask
gating in keypoint and segmentation postprocess, were refused at session creation ("no kernel for
Where(16)"), with advice to compute the op in float32 that the user's bool code cannot take.

``where(c, a, b)`` of booleans is ``(c and a) or (not c and b)``, element for element and with the
same broadcasting; a literal True or False operand drops its ``and`` (or its whole term). ONNX's
``And``, ``Or`` and ``Not`` have bool kernels everywhere, so the select is exact.
"""

from __future__ import annotations

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import fill_meta
from fxdeploy.settings import Settings

aten = torch.ops.aten
WHERES = frozenset({aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar})
MASKED_FILLS = frozenset({aten.masked_fill.Scalar, aten.masked_fill.Tensor})


def boolean_selects(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if check(node) is not None:
            continue
        condition, yes, no = node.args[:3] if node.target in WHERES else (node.args[1], node.args[2], node.args[0])
        new: list[torch.fx.Node] = []
        with gm.graph.inserting_before(node):
            result = _spelled(gm.graph, new, condition, yes, no)
        fill_meta(new)
        if not _same_shape(result.meta["val"].shape, node.meta["val"].shape):  # never seen: it broadcasts as where
            for added in reversed(new):
                gm.graph.erase_node(added)
            continue
        node.replace_all_uses_with(result)
        gm.graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def _same_shape(a: torch.Size, b: torch.Size) -> bool:
    """Whether two shapes are provably equal, comparing symbolic sizes without a guard (``!=`` on
    them would fix the dynamic dims at the example's)."""
    return len(a) == len(b) and all(statically_known_true(x == y) for x, y in zip(a, b, strict=True))


def check(node: torch.fx.Node) -> str | None:
    """None where ``node`` selects between booleans (``where``, or a bool ``masked_fill``); else why not."""
    if node.op != "call_function" or node.target not in WHERES | MASKED_FILLS:
        return "not a where or masked_fill"
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor) or value.dtype != torch.bool:
        return "its result is not bool (ONNX Runtime's Where has a kernel for it)"
    operands = node.args[:3]
    if not all(isinstance(a, bool) or _dtype(a) == torch.bool for a in operands):
        return "an operand is not a bool tensor or a Python bool"
    return None


def _spelled(
    graph: torch.fx.Graph, new: list[torch.fx.Node], condition: torch.fx.Node, yes: object, no: object
) -> torch.fx.Node:
    """``(condition and yes) or (not condition and no)``; the nodes it adds are appended to ``new``."""

    def call(op: object, *args: object) -> torch.fx.Node:
        new.append(graph.call_function(op, args))
        return new[-1]

    inverse = call(aten.logical_not.default, condition)
    terms = [t for t in (_term(call, condition, yes), _term(call, inverse, no)) if t is not None]
    if not terms:  # where(c, False, False)
        return call(aten.logical_and.default, condition, inverse)
    if terms == [condition]:  # where(c, True, False) is c: no inverse
        graph.erase_node(new.pop(0))
    return terms[0] if len(terms) == 1 else call(aten.logical_or.default, *terms)


def _term(call: object, condition: torch.fx.Node, value: object) -> torch.fx.Node | None:
    if value is True:
        return condition
    if value is False:
        return None
    return call(aten.logical_and.default, condition, value)


def _dtype(arg: object) -> torch.dtype | None:
    value = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    return value.dtype if isinstance(value, torch.Tensor) else None
