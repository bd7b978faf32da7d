"""The exported ONNX graph, optimized as torch.onnx does it, in time linear in the graph.

torch.onnx's ``optimize=True`` runs onnxscript's optimizer: two rounds of constant folding and its
pattern rewrite rules, then dead-code removal, constant lifting, initializer deduplication, CSE.
One of those rules has a pattern of two output nodes (``SlicesSplit``: two Slices of one tensor
as one Split), and onnxscript matches such a pattern by listing every node of the graph for each
candidate: time quadratic in the graph, where every other rule looks only at a node's producers.
Detectors' postprocesses are rich in Slices. Without that rule, on the same unoptimized exports
(benchmarks/onnx_optimize.py, medians): torchvision's Faster R-CNN (3,491 nodes) 16.7 s -> 5.2 s,
RetinaNet (2,920) 11.0 s -> 4.5 s, examples/idioms.py's SSD (1,454) 5.0 s -> 1.8 s, each giving the
same bytes as torch.onnx's optimizer. So fxdeploy runs the optimizer's own passes, in its order, with
every default rule whose pattern has one output node. Where onnxscript's rule list cannot be read
(another onnxscript), torch.onnx's optimizer runs as it is.
"""

from __future__ import annotations

from typing import Any

ROUNDS = 2
"""onnxscript's ``optimize_ir`` default: folding and rules twice, the second only if the first changed the graph."""


def optimize(program: Any) -> None:
    """Optimize ``program`` (a ``torch.onnx.ONNXProgram``) in place."""
    rules = linear_rules()
    if rules is None:
        program.optimize()
        return
    import onnx_ir.passes.common as common
    from onnx_ir import passes
    from onnxscript import optimizer
    from onnxscript.rewriter import RewritePass, onnx_fusions

    model = program.model
    passes.Sequential(common.InlinePass())(model)
    for _ in range(ROUNDS):
        changed = optimizer.fold_constants(model, onnx_shape_inference=True).modified
        changed = RewritePass(rules)(model).modified or changed
        changed = _orphans_registered(model.graph) or changed
        changed = passes.Sequential(
            common.RemoveUnusedNodesPass(), common.RemoveUnusedFunctionsPass(), common.RemoveUnusedOpsetsPass()
        )(model).modified or changed
        if not changed:
            break
    passes.Sequential(
        common.RemoveUnusedNodesPass(),
        common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        common.LiftSubgraphInitializersToMainGraphPass(),
        common.DeduplicateInitializersPass(),
        common.CommonSubexpressionEliminationPass(),
        common.OutputFixPass(),
        common.NameFixPass(),
    )(model)
    onnx_fusions.fuse(model)  # torch.onnx's optimize ends with these (opset 23's RMSNorm, rotary, GQA)


def linear_rules() -> tuple[Any, ...] | None:
    """onnxscript's default rewrite rules whose pattern has one output node; None where its list
    or a rule's pattern is not where onnxscript 0.7 keeps them."""
    from onnxscript import rewriter

    rules = getattr(rewriter, "_DEFAULT_REWRITE_RULES", None)
    if not rules:
        return None
    kept = []
    for rule in rules:
        pattern = getattr(rule, "_target_pattern", None)
        single = getattr(pattern, "has_single_output_node", None)
        if single is None:
            return None
        if single:
            kept.append(rule)
    return tuple(kept)


def _orphans_registered(graph: Any) -> bool:
    """Register again the constants a rewrite left unregistered; whether there were any.

    onnxscript 0.7's RewritePass stores each initializer a rule makes under the name the rule gives
    it, replacing one of that name already there: two ``clamp(y, -1, 1)`` of one tensor both become
    a Clip with bounds named ``y_min``, and the first Clip then read a value the graph no longer
    held (ONNX Runtime: "Node input 'y_min_1' is not a graph input, initializer, or output of a
    previous node"; lower() failed). Each such value keeps its tensor and is registered under a
    free name."""
    known = {id(value) for value in (*graph.initializers.values(), *graph.inputs)}
    found = False
    for node in graph:
        for value in node.inputs:
            if value is None or value.producer() is not None or id(value) in known or value.const_value is None:
                continue
            name, k = value.name or "constant", 1
            while name in graph.initializers:
                name, k = f"{value.name or 'constant'}_{k}", k + 1
            value.name = name
            graph.register_initializer(value)
            known.add(id(value))
            found = True
    return found
