"""Sizes the trace would fix: an op of an engine stage that takes a size computed from a dynamic
height or width as an ``int`` argument.

``torch.jit.trace`` follows a run-time size into a Tensor method, a torch function or a ``Scalar``
operand (``traceable_sizes`` spells the usual ones so), but an aten overload's ``int`` or ``int[]``
argument takes a plain number, which the trace records as a constant: a pad to a multiple of 32
(``F.pad(x, (0, (-w) % 32, 0, (-h) % 32))``) pads by the example's amount at every size, and pnnx
drops it outright where that amount is 0; a split or chunk by computed sizes cuts at the example's
rows (pnnx aborts re-running it at a second size, or gives wrong sizes). ncnn's layers take such
amounts as parameters, so they cannot follow the input at all. The lowering refuses to keep those
dims dynamic (``DynamicSizesUnsupported``), naming the op and its line, and ``lower()`` lowers
again at the example's size, with a ``DimWarning``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

from fxdeploy.errors import DynamicSizesUnsupported
from fxdeploy.lowering.torchscript import plain_copy
from fxdeploy.passes.graph_utils import call_site
from fxdeploy.passes.traceable_sizes import traceable_sizes
from fxdeploy.settings import Settings


def refuse_fixed_sizes(module: torch.fx.GraphModule) -> None:
    """Raise ``DynamicSizesUnsupported`` where the trace of ``module`` would fix a size computed from
    a dynamic dim besides the batch; a graph with only the batch dynamic is traced at one image anyway."""
    fixed = fixed_by_trace(module)
    if fixed:
        raise DynamicSizesUnsupported(
            f"ncnn: {'; '.join(fixed[:3])} take(s) a size computed from the input's dynamic height/width as a "
            "number, which torch.jit.trace records as a constant and ncnn's layers hold as a fixed parameter:\n  "
            "the artifact would compute it at the example's size only (a pad by the example's amount, a split at "
            "its rows). lower() lowers again with those dims fixed at the example's (a DimWarning); lower once "
            "per input size you serve, or use onnxruntime, openvino or torchscript to keep them dynamic"
        )


def fixed_by_trace(module: torch.fx.GraphModule) -> list[str]:
    """``aten.op (file:line)`` for each op whose ``int`` arguments the trace would record as constants
    although they follow a dynamic dim of the inputs besides the batch (dim 0)."""
    symbols = _image_symbols(module)
    if not symbols:
        return []
    copy = plain_copy(module)
    traceable_sizes(copy, Settings())  # what the trace sees: the sizes it keeps are spelt so
    found = []
    for node in copy.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            if any(_follows(value, symbols) for value in _int_arguments(node)):
                found.append(f"{node.target} ({call_site(node)})")
    return found


def _image_symbols(module: torch.fx.GraphModule) -> set[Any]:
    """The symbols of the inputs' dynamic dims besides dim 0."""
    values = [n.meta.get("val") for n in module.graph.nodes if n.op == "placeholder"]
    dims = [d for v in values if isinstance(v, torch.Tensor) for d in v.shape[1:] if isinstance(d, torch.SymInt)]
    return {symbol for d in dims for symbol in d.node.expr.free_symbols}


def _int_arguments(node: torch.fx.Node) -> list[Any]:
    """The values ``node`` passes as its schema's ``int``, ``SymInt`` or lists of them (not ``Scalar``)."""
    schema = node.target._schema
    given = {a.name: v for a, v in zip(schema.arguments, node.args, strict=False)} | dict(node.kwargs)
    return [given[a.name] for a in schema.arguments if a.name in given and "int" in str(a.type).lower()]


def _follows(value: Any, symbols: set[Any]) -> bool:
    """Whether ``value`` holds a node whose size follows one of ``symbols``."""
    for leaf in pytree.tree_leaves(value):
        size = leaf.meta.get("val") if isinstance(leaf, torch.fx.Node) else None
        if isinstance(size, torch.SymInt) and size.node.expr.free_symbols & symbols:
            return True
    return False
