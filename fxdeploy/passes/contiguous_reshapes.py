"""Make the input of a reshape at a dynamic size contiguous, so the ONNX exporter's decomposition
can spell it as a view.

torch.onnx runs torch's decompositions over the graph, and they re-derive every tensor's strides.
transformers' Swin permutes its attention output, calls ``.contiguous()``, then ``.view``s it; at a
dynamic batch the re-derived strides of one such value come out permuted ([4*b, 16, 2, 16] with
strides (512, 16, 256, 1)), and the ``reshape`` that torch.export recorded decomposes into a
``view`` of it, which fails: "Cannot view a tensor with shape ... as a tensor with shape ...".
Plain ``torch.onnx.export`` stops there. A ``clone`` in contiguous format right before the reshape
fixes the strides the decomposition sees; in ONNX it is an Identity, which the runtimes drop.
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.settings import Settings

aten = torch.ops.aten


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
    """None when ``node`` is a reshape at a dynamic size whose input is not a contiguous clone yet."""
    if node.op != "call_function" or node.target is not aten.reshape.default:
        return "not aten.reshape"
    source = node.args[0]
    value = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor):
        return "its input has no recorded shape"
    if all(isinstance(size, int) for size in value.shape):
        return "a static shape: the decomposition's strides are exact there"
    if source.target is aten.clone.default and source.kwargs.get("memory_format") == torch.contiguous_format:
        return "its input is a contiguous clone already"
    return None
