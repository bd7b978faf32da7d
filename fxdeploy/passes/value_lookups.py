"""``torch.isin`` and ``torch.searchsorted`` as comparisons the ONNX runtimes run.

torch.onnx has no translation for ``aten.searchsorted`` and writes ``isin`` through it (its
decomposition sorts the elements with the test elements), so a model filtering its detections by
class (``torch.isin(labels, wanted)``) or bucketing a value by constant edges was refused.

- ``isin(elements, test)`` is ``any(elements[..., None] == test.flatten(), -1)`` (negated for
  ``invert``): equality is what membership means, a NaN included (it is in nothing, as in torch).
- ``searchsorted(sequence, values)`` over a *constant*, sorted, NaN-free sequence is, per value,
  the count of the sequence's elements ``s`` with ``not (s >= v)`` (``side="right"``: ``not (s >
  v)``): along a sorted row those elements are a prefix, which is where torch's binary search ends;
  a NaN value counts every element, as torch puts it past the end. A sequence the graph computes
  may hold NaN or be unsorted, where torch's binary search is not a count; it is left as it is.

The comparison grid holds ``values x sequence`` booleans, so a test set or sequence longer than
``MAX_LENGTH`` is left as it is too.
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import attribute, replaced_by, written_in_place
from fxdeploy.passes.remove_noops import IDENTITY_OPS
from fxdeploy.settings import Settings

aten = torch.ops.aten
MAX_LENGTH = 4096
ISIN = (aten.isin.Tensor_Tensor, aten.isin.Tensor_Scalar)


def value_lookups(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    written = written_in_place(gm.graph)
    modified = False
    for node in list(gm.graph.nodes):
        if check(gm, node, written) is not None:
            continue
        with gm.graph.inserting_before(node):
            new = _isin(gm.graph, node) if node.target in ISIN else _searchsorted(gm.graph, node)
        replaced_by(new, node)
        node.replace_all_uses_with(new[-1])
        gm.graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def check(gm: torch.fx.GraphModule, node: torch.fx.Node, written: set[torch.fx.Node]) -> str | None:
    """None when ``node`` is an isin or a searchsorted that comparisons compute exactly, else why not."""
    if node.op != "call_function" or node.target not in (*ISIN, aten.searchsorted.Tensor):
        return "not aten.isin or aten.searchsorted.Tensor"
    looked_up = node.args[1] if node.target in ISIN else node.args[0]  # the test elements, the sequence
    value = looked_up.meta.get("val") if isinstance(looked_up, torch.fx.Node) else None
    if isinstance(value, torch.Tensor) and not (isinstance(value.numel(), int) and value.numel() <= MAX_LENGTH):
        return f"{value.numel()} test elements or sequence values: the comparison grid would be too large"
    if node.target in ISIN:
        return None
    if node.kwargs.get("sorter") is not None:
        return "a sorter is given"
    sequence = _constant(gm, looked_up, written)
    if sequence is None:
        return "the sequence is not a constant: it may hold NaN or be unsorted, where a count is not torch's search"
    if sequence.is_floating_point() and bool(sequence.isnan().any()):
        return "the sorted sequence holds NaN"
    if sequence.dim() == 0 or not bool((sequence[..., 1:] >= sequence[..., :-1]).all()):
        return "the sequence is not sorted along its last dim"
    return None


def _constant(gm: torch.fx.GraphModule, node: object, written: set[torch.fx.Node]) -> torch.Tensor | None:
    """The tensor a constant node holds (through identity ops), or None."""
    while isinstance(node, torch.fx.Node) and node not in written and node.target in IDENTITY_OPS:
        node = node.args[0]
    if not isinstance(node, torch.fx.Node) or node in written:
        return None
    value = attribute(gm, node)
    return value if isinstance(value, torch.Tensor) else None


def _isin(graph: torch.fx.Graph, node: torch.fx.Node) -> list[torch.fx.Node]:
    elements, test = node.args[:2]
    invert = node.kwargs.get("invert", False)
    new = [graph.call_function(aten.unsqueeze.default, (elements, -1))]
    if isinstance(test, torch.fx.Node):
        new.append(graph.call_function(aten.reshape.default, (test, [-1])))
        new.append(graph.call_function(aten.eq.Tensor, (new[0], new[-1])))
    else:
        new.append(graph.call_function(aten.eq.Scalar, (new[0], test)))
    new.append(graph.call_function(aten.any.dim, (new[-1], -1)))
    if invert:
        new.append(graph.call_function(aten.logical_not.default, (new[-1],)))
    return new


def _searchsorted(graph: torch.fx.Graph, node: torch.fx.Node) -> list[torch.fx.Node]:
    sequence, values = node.args[:2]
    right = node.kwargs.get("right", False) or node.kwargs.get("side") == "right"
    dtype = torch.int32 if node.kwargs.get("out_int32", False) else torch.int64
    new = [graph.call_function(aten.unsqueeze.default, (values, -1))]  # [..., m, 1] against [..., n]
    if sequence.meta["val"].dim() > 1:
        new.append(graph.call_function(aten.unsqueeze.default, (sequence, -2)))
        sequence = new[-1]
    compare = aten.gt.Tensor if right else aten.ge.Tensor
    new.append(graph.call_function(compare, (sequence, new[0])))
    new.append(graph.call_function(aten.logical_not.default, (new[-1],)))
    new.append(graph.call_function(aten.sum.dim_IntList, (new[-1], [-1]), {"dtype": dtype}))
    return new
