"""TorchScript lowering: a passed GraphModule becomes a ScriptModule that needs only torch.

The graph is *scripted*, not traced. torch.export graphs call ``torch.ops.aten.*`` overloads and
carry symbolic sizes (``aten.sym_size.int``); a trace would bake those sizes in (and the tracer
rejects the 0-d size tensors it makes as aten Scalar arguments), so a dynamic batch would break.
Scripting the same code with each overload replaced by its overload packet keeps the sizes
symbolic, and TorchScript resolves the overload again from the argument types.

``fxdeploy::multiclass_nms`` becomes a call to the reference kernel, which TorchScript compiles
into the module, so a saved artifact loads with ``torch.jit.load`` in a process that never
imported fxdeploy.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch

from fxdeploy.artifact.jit_warnings import quiet_jit
from fxdeploy.errors import LoweringError
from fxdeploy.ops.names import MULTICLASS_NMS, is_nms
from fxdeploy.passes.graph_utils import call_site
from fxdeploy.passes.traceable_sizes import traceable_sizes
from fxdeploy.settings import Settings


def plain_copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A GraphModule with the same code but without torch.export's input-constraint hooks.

    ``ExportedProgram.module()`` installs a forward pre-hook that inspects symbolic shapes; the
    TorchScript compiler and tracer cannot run it.
    """
    graph = torch.fx.Graph()
    output = graph.graph_copy(gm.graph, {})
    graph.output(output)
    copy = torch.fx.GraphModule(gm, graph)
    copy.eval()
    _freeze_parameters(copy)
    return copy


def _freeze_parameters(module: torch.nn.Module) -> None:
    """An artifact is for inference: its weights must not require grad.

    Otherwise a plain ``torch.jit.load`` user, outside ``no_grad``, runs autograd through the
    model and the NMS kernel (whose ``out=`` calls refuse grad). The copy's containers are new
    modules, so the user's model keeps its own parameters untouched; the storage is shared.
    """
    for name, parameter in list(module.named_parameters()):
        owner_name, _, leaf = name.rpartition(".")
        owner = module.get_submodule(owner_name) if owner_name else module
        setattr(owner, leaf, torch.nn.Parameter(parameter.detach(), requires_grad=False))


def replace_nms_with_reference(gm: torch.fx.GraphModule) -> int:
    """Point every ``fxdeploy::multiclass_nms`` node at the TorchScript-compatible reference kernel."""
    from fxdeploy.ops.reference import multiclass_nms_reference

    count = 0
    for node in gm.graph.nodes:
        if is_nms(node, (MULTICLASS_NMS,)):
            node.target = multiclass_nms_reference
            count += 1
    if count:
        gm.recompile()
    return count


def script_graph(gm: torch.fx.GraphModule, *, target: str) -> torch.jit.ScriptModule:
    """Script a (plain-copied) passed graph; the error names the op TorchScript could not compile."""
    gm = plain_copy(gm)
    replace_nms_with_reference(gm)
    _refuse_custom_ops(gm, target)
    for node in gm.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            node.target = node.target.overloadpacket
    gm.recompile()
    try:
        with quiet_jit():
            return torch.jit.script(gm)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise LoweringError(
            f"{target} lowering: TorchScript cannot compile the passed graph: {type(exc).__name__}: "
            f"{first[:400]}\n{_context(exc)}"
        ) from exc


def trace_graph(
    gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor], *, target: str
) -> torch.jit.ScriptModule:
    """Trace at the given (static) shapes: what converters such as pnnx expect as input."""
    gm = plain_copy(gm)
    replace_nms_with_reference(gm)
    _refuse_custom_ops(gm, target)
    traceable_sizes(gm, Settings())
    try:
        with quiet_jit(), torch.no_grad():
            return torch.jit.trace(gm, tuple(example_inputs), check_trace=False)
    except Exception as exc:
        raise LoweringError(
            f"{target} lowering: torch.jit.trace of the passed graph failed on inputs "
            f"{[tuple(x.shape) for x in example_inputs]}: {_trace_failure(exc)}"
        ) from exc


_UNTYPED = re.compile(r"INTERNAL ASSERT FAILED.*?We don't have an op for (\S+)", re.DOTALL)


def _trace_failure(exc: Exception) -> str:
    """What broke the trace; torch's internal assert on an op its tracer records without a schema
    (``aten::zeros_like`` of a functional ``zero``: ``passes/ncnn/functional_fills``) said plainly."""
    untyped = _UNTYPED.search(str(exc))
    if untyped is None:
        return f"{type(exc).__name__}: {str(exc)[:400]}"
    return (f"torch.jit.trace records an op of this graph as {untyped.group(1)} with arguments it has no schema "
            "for (a torch limitation, not the model's): an in-place write through a view whose functional form "
            "the tracer cannot record. onnxruntime, openvino and torchscript lower it "
            "(fxdeploy.lower(..., target='onnxruntime')), or write it out of place (torch.where, torch.cat)")


def _refuse_custom_ops(gm: torch.fx.GraphModule, target: str) -> None:
    """A leftover fxdeploy op would make the artifact depend on fxdeploy being imported; a higher-order
    op (``torch.cond``'s, with its branches as subgraphs) has no TorchScript form at all."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.HigherOrderOperator):
            raise LoweringError(
                f"{target} lowering: {node.target.name()} (node {node.name!r}, {call_site(node)}) has no TorchScript "
                "form (nor in pnnx, which reads TorchScript); onnxruntime and openvino lower it "
                "(fxdeploy.lower(..., target='onnxruntime'))"
            )
        name = getattr(node.target, "_name", None) if node.op == "call_function" else None
        if isinstance(name, str) and name.startswith("fxdeploy::"):
            raise LoweringError(
                f"{target} lowering: op {name} (node {node.name!r}) has no TorchScript form; "
                "only fxdeploy::multiclass_nms does (substitute_nms rewrites nms/batched_nms into it)"
            )


def _context(exc: Exception) -> str:
    """The source line TorchScript points at ('~~~ <--- HERE'), which names the failing op."""
    lines = str(exc).splitlines()
    for i, line in enumerate(lines):
        if "<--- HERE" in line and i > 0:
            return "  at: " + lines[i - 1].strip()[:300]
    return ""
