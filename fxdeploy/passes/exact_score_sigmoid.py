"""Spell a score sigmoid as ``1 / (1 + exp(-x))`` where the runtime's Sigmoid does not saturate.

ONNX Runtime's Sigmoid is MLAS's approximation: ``sigmoid(17)`` is 0.9999999 there and exactly 1.0
in torch. Scores that saturate tie exactly in eager, and docs/nms-spec.md breaks a tie by the lower box
index; on ONNX Runtime the same scores differ in their last bit, so of two overlapping boxes the
higher score survives instead. ``1 / (1 + exp(-x))`` in ONNX Runtime's Exp, Add and Reciprocal
saturates where torch does (exactly equal on a sweep of 10..20, and on 96% of random inputs).

Only the sigmoids that make NMS scores are respelt: those reached backwards from a
``multiclass_nms`` scores input through anything but a layer that mixes values (a convolution or a
matrix product). A sigmoid inside the network (a squeeze-excitation gate) keeps its fast kernel.
"""

from __future__ import annotations

import torch

from fxdeploy.ops.names import MULTICLASS_NMS, is_nms
from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import is_op
from fxdeploy.settings import Settings

aten = torch.ops.aten

MIXING = frozenset({
    "aten.convolution.default", "aten.conv2d.default", "aten.mm.default", "aten.addmm.default",
    "aten.bmm.default", "aten.matmul.default", "aten.linear.default",
})
"""Where the walk back from the scores stops: past these, a sigmoid is inside the network."""


def exact_score_sigmoid(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    scores = [n.args[1] for n in gm.graph.nodes if is_nms(n, (MULTICLASS_NMS,))]
    for node in _score_sigmoids(scores):
        reason = check(node)
        if reason is None:
            _replace(gm, node)
            modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def check(node: torch.fx.Node) -> str | None:
    """None when ``node`` can be respelt, else why not."""
    if not is_op(node, "aten.sigmoid.default"):
        return f"{node.name} is not aten.sigmoid"
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        return f"{node.name} has no floating-point value to keep the dtype of"
    return None


def _score_sigmoids(scores: list[torch.fx.Node]) -> list[torch.fx.Node]:
    """Sigmoids reached backwards from the scores before any layer that mixes values, in graph order."""
    seen: set[torch.fx.Node] = set()
    stack = [s for s in scores if isinstance(s, torch.fx.Node)]
    found: list[torch.fx.Node] = []
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if is_op(node, "aten.sigmoid.default"):
            found.append(node)
            continue
        if node.op == "call_function" and str(node.target) in MIXING:
            continue
        stack.extend(node.all_input_nodes)
    order = {n: i for i, n in enumerate(found[0].graph.nodes)} if found else {}
    return sorted(found, key=order.__getitem__)


def _replace(gm: torch.fx.GraphModule, node: torch.fx.Node) -> None:
    graph, (x,) = gm.graph, node.args
    with graph.inserting_before(node):
        negated = graph.call_function(aten.neg.default, (x,))
        exp = graph.call_function(aten.exp.default, (negated,))
        denominator = graph.call_function(aten.add.Tensor, (exp, 1.0))
        exact = graph.call_function(aten.reciprocal.default, (denominator,))
    for new in (negated, exp, denominator, exact):
        new.meta.update(node.meta)  # the same shape and dtype, and the user's call site
    node.replace_all_uses_with(exact)
    graph.erase_node(node)
