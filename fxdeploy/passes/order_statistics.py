"""``median`` and ``kthvalue`` values as a sort and a select, on the ONNX targets.

torch.onnx has no translation for ``aten.median`` or ``aten.kthvalue``, so a model taking a median
(a robust score threshold, a median filter) was refused. The k-th smallest value along a dim is
element ``k - 1`` of the values sorted along it: exactly torch's, NaN included (both put NaN past
every number). ``median`` is the lower median, element ``(n - 1) // 2``, except that torch gives NaN
where the row holds one, which a ``where`` over ``isnan(...).any(dim)`` keeps.

Only where the indices are not read: which of several equal values' index torch returns is its
quickselect's choice (``kthvalue(k=2)`` of ``[3, 1, 1, 2]`` gives index 1; a sort gives either), and
a rewrite must give eager's outputs wherever it fires. Such a node stays, and torch.onnx says so.
"""

from __future__ import annotations

import operator

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import replaced_by
from fxdeploy.settings import Settings

aten = torch.ops.aten
WITH_INDICES = (aten.median.dim, aten.kthvalue.default)


def order_statistics(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if check(node) is not None:
            continue
        x, k, dim, keepdim = _arguments(node)
        graph = gm.graph
        with graph.inserting_before(node):
            whole = node.target is aten.median.default  # of all elements: of them flattened
            new = [graph.call_function(aten.reshape.default, (x, [-1]))] if whole else []
            source = new[-1] if whole else x
            new.append(graph.call_function(aten.sort.default, (source, dim)))
            new.append(graph.call_function(operator.getitem, (new[-1], 0)))
            value = x.meta["val"]
            size = value.numel() if whole else value.shape[dim]
            sorted_values = new[-1]
            if k is None and not isinstance(size, int):  # the lower median's place, at run time
                new.append(graph.call_function(aten.sym_size.int, (source, dim)))
                new.append(graph.call_function(operator.sub, (new[-1], 1)))
                new.append(graph.call_function(operator.floordiv, (new[-1], 2)))
                at = new[-1]
            else:
                at = (size - 1) // 2 if k is None else k - 1
            new.append(graph.call_function(aten.select.int, (sorted_values, dim, at)))
            if k is None and value.is_floating_point():  # a median: NaN where the row holds one
                new.append(graph.call_function(aten.isnan.default, (source,)))
                new.append(graph.call_function(aten.any.dim, (new[-1], dim)))
                new.append(graph.call_function(aten.where.ScalarSelf, (new[-1], float("nan"), new[-3])))
            if keepdim:
                new.append(graph.call_function(aten.unsqueeze.default, (new[-1], dim)))
        replaced_by(new, node)
        values = new[-1]
        if whole:
            node.replace_all_uses_with(values)
        for user in list(node.users):  # the values' getitem, and the indices' one that nothing reads
            if user.args[1] == 0:
                user.replace_all_uses_with(values)
            graph.erase_node(user)
        graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def check(node: torch.fx.Node) -> str | None:
    """None when ``node`` is a median or k-th value whose indices nothing reads, else why it stays."""
    if node.op != "call_function" or node.target not in (*WITH_INDICES, aten.median.default):
        return "not aten.median or aten.kthvalue"
    if node.target in WITH_INDICES and any(user.target is not operator.getitem or user.args[1] != 0 and user.users
                                           for user in node.users):
        return "its indices are read: torch's index among equal values is its quickselect's choice"
    x, k, dim, _ = _arguments(node)
    value = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor) or value.dim() == 0 and node.target is not aten.median.default:
        return "no input shape recorded, or a 0-d input"
    size = value.numel() if node.target is aten.median.default else value.shape[dim]
    if isinstance(size, int) and size == 0:
        return "the reduced dim is empty"
    if k is not None and not isinstance(size, int) and not (isinstance(k, int) and k >= 1):
        return f"k={k!r} is not a number of at least 1"
    if k is not None and isinstance(size, int) and not (isinstance(k, int) and 1 <= k <= size):
        return f"k={k!r} is not in [1, {size}]"
    return None


def _arguments(node: torch.fx.Node) -> tuple[torch.fx.Node, int | None, int, bool]:
    """(input, k (None: the median), dim, keepdim)."""
    args = list(node.args)
    if node.target is aten.median.default:
        return args[0], None, 0, False
    if node.target is aten.median.dim:
        args = [args[0], None, *args[1:]]
    x, k = args[0], args[1]
    dim = args[2] if len(args) > 2 else node.kwargs.get("dim", -1)
    keepdim = args[3] if len(args) > 3 else node.kwargs.get("keepdim", False)
    value = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    rank = value.dim() if isinstance(value, torch.Tensor) else 1
    return x, k, dim % max(rank, 1), keepdim
