"""Size arithmetic that ``torch.jit.trace`` keeps: the TorchScript and ncnn lowerings trace a plain
copy of the final graph, and this pass runs on that copy only, right before the trace (it spells
aten calls as Tensor methods and torch functions, which the ONNX exporter need not see). It is in
no pipeline (``passes/pipelines.py``): ``lowering.torchscript.trace_graph`` runs it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

from fxdeploy.passes.base import PassResult
from fxdeploy.settings import Settings

_aten = torch.ops.aten
_AS_METHOD = {_aten.view.default: "view", _aten.reshape.default: "reshape", _aten.expand.default: "expand",
              _aten.repeat.default: "repeat", _aten.sym_size.int: "size"}
_UPSAMPLE = {_aten.upsample_nearest2d.vec: "nearest", _aten.upsample_bilinear2d.vec: "bilinear",
             _aten.upsample_bicubic2d.vec: "bicubic"}


def traceable_sizes(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    """Rewrite size arithmetic so that ``torch.jit.trace`` keeps it.

    The tracer follows a size read with ``Tensor.size`` into ``Tensor.view`` or ``torch.arange``,
    but an aten overload call (``aten.sym_size.int``, ``aten.view.default``) hands it plain ints,
    which it records as constants: the trace would then only run at the traced input size. Only
    nodes that read or take a symbolic size are rewritten, so a static graph is left as it is.
    """
    symbolic: set[torch.fx.Node] = set()
    modified = False
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
            modified = True
            if node in symbolic:
                symbolic.add(replacement)
    gm.recompile()
    return PassResult(gm, modified)


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
