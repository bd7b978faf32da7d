"""Spell a two-operand einsum that is a (batched) matrix product as ``matmul``.

OWL-ViT scores each patch against each text query with ``einsum("...pd,...qd->...pq", patches,
queries)``. pnnx rewrites the equation for ncnn's Einsum layer with the batch letter dropped, and
the layer then reads past its operands (a segfault, or other values). The equation is a matrix
product, which ncnn runs as MatMul:

    einsum("...ik,...kj->...ij", a, b) == matmul(a, b)

with each operand transposed first where its two letters come the other way round (``...jk``
for ``b``: ``b.transpose(-1, -2)``), and the product transposed where the output reads ``...ji``.
Fires where each operand and the output have the same leading letters (or a leading ``...`` in
all three), then two letters each: one shared by the operands and summed over (in neither
output), and one of each operand's own, kept in the output. Other equations stay.
"""

from __future__ import annotations

import logging

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import call_site, fill_meta
from fxdeploy.settings import Settings

logger = logging.getLogger(__name__)
aten = torch.ops.aten
Node = torch.fx.Node
_OPERANDS = 2
_LETTERS = 2
"""Letters after the batch: a matrix's rows and columns."""


def einsum_products(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.einsum.default:
            continue
        plan = product_plan(node)
        if isinstance(plan, str):
            logger.debug("einsum_products: %s stays: %s", call_site(node), plan)
            continue
        left, right, swap = plan
        a, b = node.args[1]
        graph, new = gm.graph, []
        with graph.inserting_before(node):
            if left:
                a = graph.call_function(aten.transpose.int, (a, -1, -2))
                new.append(a)
            if right:
                b = graph.call_function(aten.transpose.int, (b, -1, -2))
                new.append(b)
            product = graph.call_function(aten.matmul.default, (a, b))
            new.append(product)
            if swap:
                product = graph.call_function(aten.transpose.int, (product, -1, -2))
                new.append(product)
        fill_meta(new)
        for item in new:
            item.meta["stack_trace"] = node.meta.get("stack_trace")
        node.replace_all_uses_with(product)
        graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def product_plan(node: Node) -> tuple[bool, bool, bool] | str:
    """(transpose a, transpose b, transpose the product) that makes ``node`` a matmul; else why not."""
    equation, operands = node.args[0], node.args[1]
    if not isinstance(equation, str) or len(operands) != _OPERANDS or "->" not in equation:
        return "not two operands with an explicit output"
    inputs, output = equation.replace(" ", "").split("->")
    terms = [*inputs.split(","), output]
    if len(terms) != _OPERANDS + 1:
        return f"{equation!r} does not name two operands"
    ellipsis = all(t.startswith("...") for t in terms)
    if ellipsis:
        terms = [t[3:] for t in terms]
    if any("." in t for t in terms):
        return f"{equation!r} has '...' in some terms only, or after a letter"
    values = [o.meta.get("val") if isinstance(o, Node) else None for o in operands]
    ranks = zip(values, terms[:2], strict=True)
    if not all(isinstance(v, torch.Tensor) and (ellipsis or v.dim() == len(t)) for v, t in ranks):
        return f"{equation!r}: an operand's rank is not its term's length"
    batch = terms[0][:-_LETTERS]
    if any(len(t) < _LETTERS or t[:-_LETTERS] != batch or len(set(t)) != len(t) for t in terms):
        return f"{equation!r}: the terms do not share their leading letters, or repeat one"
    (a1, a2), (b1, b2), (o1, o2) = (t[-_LETTERS:] for t in terms)
    if {a1, a2, b1, b2, o1, o2} & set(batch):
        return f"{equation!r} repeats a batch letter in a matrix"
    shared = {a1, a2} & {b1, b2}
    if len(shared) != 1 or shared & {o1, o2}:
        return f"{equation!r} does not sum over exactly one letter the operands share"
    k = shared.pop()
    i, j = ({a1, a2} - {k}).pop(), ({b1, b2} - {k}).pop()
    if {o1, o2} != {i, j} or i == j:
        return f"{equation!r} does not keep each operand's own letter"
    return (a1 == k, b2 == k, (o1, o2) == (j, i))
