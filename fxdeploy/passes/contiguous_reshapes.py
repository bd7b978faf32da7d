"""Give a reshape or view a contiguous clone to read where torch.onnx's decompositions would see
other strides than capture did, so that it stays a valid view in every trace.

torch.onnx traces the graph again (its decompositions), then once more (its type promotion), and
each trace re-derives every tensor's strides; a ``reshape`` becomes a ``view`` where the strides of
that trace allow one. Strides are not a function of the graph alone: ``scaled_dot_product_attention``
returns its output in its query's layout (``[B, heads, N, d]`` with the strides of ``[B, N, heads,
d]``) from the flash kernel, and contiguous from the math kernel, which is picked where an input
needs a gradient (capture runs under ``no_grad``, lowering's re-export does not, and Swin's mask is
computed from a parameter). transformers' Swin transposes that output back and reshapes it to
``[B, N, heads * d]``: a view in one trace, a non-contiguous tensor in the next, where the view
fails: "Cannot view a tensor with shape [64, 49, 3, 32] and strides (4704, 32, 1568, 1) as a tensor
with shape (64, 49, 96)". ``.contiguous()`` does not help: it decomposes to nothing wherever a trace
finds the tensor contiguous. A dynamic size does the same to any reshape.

So every reshape or view of a permuted tensor (through ``.contiguous()``), and every reshape at a
dynamic size, reads a ``clone`` in contiguous format: a real op, contiguous in every trace. In ONNX
it is an Identity, which the runtimes drop.
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.settings import Settings

aten = torch.ops.aten
RESHAPES = frozenset({aten.reshape.default, aten.view.default, aten._unsafe_view.default})
PERMUTES = frozenset({aten.permute, aten.transpose, aten.t, aten.swapaxes, aten.swapdims, aten.movedim})
"""Views that reorder dims: the layout of their result follows their input's, trace by trace."""


def contiguous_reshapes(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if check(node) is not None:
            continue
        source = node.args[0]
        with gm.graph.inserting_before(node):
            clone = gm.graph.call_function(aten.clone.default, (source,), {"memory_format": torch.contiguous_format})
        clone.meta.update(source.meta)
        node.replace_input_with(source, clone)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def check(node: torch.fx.Node) -> str | None:
    """None when ``node`` is a reshape or view of a permuted tensor, or a reshape at a dynamic size,
    whose input is not a contiguous clone yet."""
    if node.op != "call_function" or node.target not in RESHAPES:
        return "not a reshape or view"
    source = node.args[0]
    value = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor):
        return "its input has no recorded shape"
    if source.target is aten.clone.default and source.kwargs.get("memory_format") == torch.contiguous_format:
        return "its input is a contiguous clone already"
    if _permuted(source):
        return None
    if node.target is aten.reshape.default and not all(isinstance(size, int) for size in value.shape):
        return None
    return "its input is not permuted, and it is a view or a reshape at a static size"


def _permuted(node: torch.fx.Node) -> bool:
    """Whether ``node`` is a permute, or ``.contiguous()`` or a copy of one."""
    while node.op == "call_function" and (node.target is aten.contiguous.default or (
            node.target is aten.clone.default and node.kwargs.get("memory_format") in (None, torch.preserve_format))):
        node = node.args[0]
    return node.op == "call_function" and getattr(node.target, "overloadpacket", None) in PERMUTES
