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

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fxdeploy.artifact.jit_warnings import quiet_jit
from fxdeploy.errors import LoweringError
from fxdeploy.ops.names import MULTICLASS_NMS, is_nms


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
    traceable_sizes(gm)
    try:
        with quiet_jit(), torch.no_grad():
            return torch.jit.trace(gm, tuple(example_inputs), check_trace=False)
    except Exception as exc:
        raise LoweringError(
            f"{target} lowering: torch.jit.trace of the passed graph failed on inputs "
            f"{[tuple(x.shape) for x in example_inputs]}: {type(exc).__name__}: {str(exc)[:400]}"
        ) from exc


_aten = torch.ops.aten
_AS_METHOD = {_aten.view.default: "view", _aten.reshape.default: "reshape", _aten.expand.default: "expand",
              _aten.repeat.default: "repeat", _aten.sym_size.int: "size"}
_UPSAMPLE = {_aten.upsample_nearest2d.vec: "nearest", _aten.upsample_bilinear2d.vec: "bilinear",
             _aten.upsample_bicubic2d.vec: "bicubic"}


def traceable_sizes(gm: torch.fx.GraphModule) -> None:
    """Rewrite size arithmetic so that ``torch.jit.trace`` keeps it.

    The tracer follows a size read with ``Tensor.size`` into ``Tensor.view`` or ``torch.arange``,
    but an aten overload call (``aten.sym_size.int``, ``aten.view.default``) hands it plain ints,
    which it records as constants: the trace would then only run at the traced input size. Only
    nodes that read or take a symbolic size are rewritten, so a static graph is left as it is.
    """
    symbolic: set[torch.fx.Node] = set()
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        leaves = pytree.tree_leaves((node.args, node.kwargs))
        takes = any(isinstance(a, torch.fx.Node) and a in symbolic for a in leaves)
        if node.target is _aten.sym_size.int or isinstance(node.meta.get("val"), torch.SymInt):
            symbolic.add(node)
        if not (takes or node.target is _aten.sym_size.int):
            continue
        replacement = _traceable(gm.graph, node)
        if replacement is not None:
            replacement.meta = dict(node.meta)
            node.replace_all_uses_with(replacement)
            gm.graph.erase_node(node)
            if node in symbolic:
                symbolic.add(replacement)
    gm.recompile()


def _traceable(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    args, kwargs = node.args, dict(node.kwargs)
    with graph.inserting_before(node):
        if node.target in _AS_METHOD:
            return graph.call_method(_AS_METHOD[node.target], args[:2])
        if node.target in (_aten.arange.default, _aten.arange.start, _aten.ones.default, _aten.zeros.default):
            keep = {k: v for k, v in kwargs.items() if k in ("dtype", "device")}
            name = node.target.overloadpacket.__name__
            return graph.call_function(getattr(torch, name), args, keep)
        if node.target is _aten.scalar_tensor.default:
            keep = {k: v for k, v in kwargs.items() if k == "dtype"}
            return graph.call_function(size_as_tensor, args[:1], keep)
        if node.target is _aten.slice.Tensor:
            return graph.call_function(slice_by_sizes, args, kwargs)
        if node.target in _UPSAMPLE:
            mode = _UPSAMPLE[node.target]
            size, scale = args[1], args[-1] if len(args) > 2 else kwargs.get("scale_factors")
            extra = {"align_corners": args[2]} if mode != "nearest" and len(args) > 3 else {}
            options = {"size": size, "scale_factor": scale, "mode": mode, **extra}
            return graph.call_function(torch.nn.functional.interpolate, (args[0],), options)
    return None


def slice_by_sizes(
    x: torch.Tensor, dim: int = 0, start: Any = None, end: Any = None, step: int = 1
) -> torch.Tensor:
    """``aten.slice`` with bounds computed from run-time sizes, in a form ``torch.jit.trace``
    records: Python indexing with the traced sizes (RT-DETR's decoder takes each level's rows of
    the encoder memory as ``memory[:, start : start + height * width]``)."""
    return x[(slice(None),) * (dim % x.dim()) + (slice(start, end, step),)]


def size_as_tensor(size: int | torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``aten.scalar_tensor`` of a size, in a form ``torch.jit.trace`` records.

    While tracing, ``Tensor.size(d)`` hands over a 0-dim tensor that stands for the run-time size;
    ``aten::scalar_tensor`` takes only a number, so the tracer fails on it. A cast of that tensor is
    recorded and keeps following the input size.
    """
    dtype = torch.get_default_dtype() if dtype is None else dtype
    if isinstance(size, torch.Tensor):
        return size.to(dtype)
    return torch.scalar_tensor(size, dtype=dtype)


def _refuse_custom_ops(gm: torch.fx.GraphModule, target: str) -> None:
    """A leftover fxdeploy op would make the artifact depend on fxdeploy being imported."""
    for node in gm.graph.nodes:
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
