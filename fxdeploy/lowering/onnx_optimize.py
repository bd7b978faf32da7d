"""The exported ONNX graph, optimized as torch.onnx does it, except on very large graphs.

torch.onnx's ``optimize=True`` runs onnxscript's optimizer: constant folding, its pattern rewrite
rules, dead-code removal, CSE, then its fusions. The rewrite rules match every rule against the
graph, again and again, and their cost grows faster than the graph: torchvision's SSD300 (its
postprocess loops over 90 classes, vectorized over the batch) exported 11,093 nodes, on which the
rules took 181 s of a 6 minute lowering. Constant folding and CSE alone left 4,439 nodes where
the whole optimizer leaves 4,327, and ONNX Runtime's call at batch 8 took the same time on either
(4.03-4.11 s against 3.84-4.42 s, two sessions each). So above ``REWRITE_NODE_LIMIT`` nodes the
graph is folded, deduplicated and cleaned without the rules, and the one rule a runtime may need
(``CastLike`` as ``Cast``: not every ONNX consumer reads opset 15's CastLike) is applied here.
"""

from __future__ import annotations

from typing import Any

REWRITE_NODE_LIMIT = 8000


def optimize(program: Any) -> None:
    """Optimize ``program`` (a ``torch.onnx.ONNXProgram``) in place."""
    model = program.model
    if sum(1 for _ in model.graph.all_nodes()) <= REWRITE_NODE_LIMIT:
        program.optimize()
        return
    import onnx_ir.passes.common as common
    from onnx_ir import passes
    from onnxscript import optimizer

    passes.Sequential(common.InlinePass())(model)
    optimizer.fold_constants(model)
    _cast_like_as_cast(model.graph)
    passes.Sequential(
        common.RemoveUnusedNodesPass(),
        common.CommonSubexpressionEliminationPass(),
        common.RemoveUnusedNodesPass(),
        common.RemoveUnusedFunctionsPass(),
        common.RemoveUnusedOpsetsPass(),
        common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        common.DeduplicateInitializersPass(),
        common.OutputFixPass(),
        common.NameFixPass(),
    )(model)


def _cast_like_as_cast(graph: Any) -> None:
    """``CastLike(x, like)`` as ``Cast(x, to=like's dtype)`` where that dtype is known."""
    import onnx_ir as ir
    from onnx_ir import convenience

    for node in list(graph):
        if node.op_type != "CastLike" or node.domain not in ("", "ai.onnx") or node.inputs[1] is None:
            continue
        dtype = node.inputs[1].dtype
        if dtype is None:
            continue
        cast = ir.node("Cast", [node.inputs[0]], {"to": dtype}, name=node.name)
        convenience.replace_nodes_and_values(graph, node, [node], [cast], node.outputs, cast.outputs)
