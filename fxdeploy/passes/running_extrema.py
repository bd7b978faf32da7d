"""``cummax`` and ``cummin`` spelt with a masked reduction, on the ONNX targets.

ONNX has no running maximum, and torch.onnx no translation for ``aten.cummax``/``aten.cummin``, so
a model keeping the best score so far (a running maximum over steps or anchors) was refused. Along
the dim, of size n, element i of the values is the max (min) of elements 0..i: the elements laid
out as an [n, n] grid, those past i masked to the identity of the reduction, reduced along j.
NaN wins, as in torch: once a NaN is seen, every later value is NaN. The values returned are the
elements at the indices below, as torch's kernel keeps them (the sign of a zero included).

torch's index is that of the last element equal to the value (its kernel updates the index when
an element ties the running extreme; a NaN ties a NaN): ``cummax([1, 3, 3, 2])`` gives indices
``[0, 1, 2, 2]``. So the index is the max of ``j`` over the masked grid where element j equals
value i (both NaN counts as equal), exactly. The grid holds n times the input's values: where the
static sizes make more than ``MAX_ELEMENTS``, or the dim is dynamic, the op stays.
"""

from __future__ import annotations

import math
import operator

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import replaced_by
from fxdeploy.settings import Settings

aten = torch.ops.aten
RUNNING = {aten.cummax.default: (aten.amax.default, True), aten.cummin.default: (aten.amin.default, False)}
MAX_ELEMENTS = 2**24


def running_extrema(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    graph = gm.graph
    for node in list(graph.nodes):
        if check(node) is not None:
            continue
        x, dim = node.args[0], node.args[1] % max(node.args[0].meta["val"].dim(), 1)
        with graph.inserting_before(node):
            new, values, indices = _spelt(graph, node, x, dim)
        replaced_by(new, node)
        for user in list(node.users):  # getitem 0: values, 1: indices
            user.replace_all_uses_with(values if user.args[1] == 0 else indices)
            graph.erase_node(user)
        graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def check(node: torch.fx.Node) -> str | None:
    """None when ``node`` is a cummax/cummin over a static dim whose grid is small enough, else why it stays."""
    if node.op != "call_function" or node.target not in RUNNING:
        return "not aten.cummax or aten.cummin"
    value = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
    if not isinstance(value, torch.Tensor) or value.dim() == 0 or value.is_complex():
        return "no real input of rank 1 or more recorded"
    if any(user.target is not operator.getitem for user in node.users):
        return "its result is read other than by its values and indices"
    n = value.shape[node.args[1] % value.dim()]
    if not isinstance(n, int) or n == 0:
        return "the running dim is dynamic or empty: the mask needs its size"
    grid = n * math.prod(s for s in value.shape if isinstance(s, int))
    if grid > MAX_ELEMENTS:
        return f"the [n, n] grid holds {grid} values, more than {MAX_ELEMENTS}"
    return None


def _spelt(graph: torch.fx.Graph, node: torch.fx.Node, x: torch.fx.Node,
           dim: int) -> tuple[list[torch.fx.Node], torch.fx.Node, torch.fx.Node]:
    """The nodes computing the values and indices, along the last dim then moved back to ``dim``."""
    reduce, largest = RUNNING[node.target]
    value = x.meta["val"]
    n, last, dtype = value.shape[dim], value.dim() - 1, value.dtype
    new: list[torch.fx.Node] = []

    def call(op: object, args: tuple, kwargs: dict | None = None) -> torch.fx.Node:
        new.append(graph.call_function(op, args, kwargs or {}))
        return new[-1]

    source = call(aten._to_copy.default, (x,), {"dtype": torch.int32}) if dtype == torch.bool else x
    along = call(aten.transpose.int, (source, dim, last))  # [..., n]
    row = call(aten.unsqueeze.default, (along, -2))  # element j: [..., 1, n]
    j = call(aten.arange.default, (n,), {"dtype": torch.int64, "device": value.device})
    mask = call(aten.le.Tensor, (j, call(aten.unsqueeze.default, (j, -1))))  # j <= i: [n, n]
    values = call(reduce, (call(aten.where.ScalarOther, (mask, row, _identity(dtype, largest))), [-1]))
    if dtype.is_floating_point:  # a NaN at or before i: NaN
        nan_row = call(aten.isnan.default, (row,))
        seen = call(aten.any.dim, (call(aten.logical_and.default, (nan_row, mask)), -1))
        values = call(aten.where.ScalarSelf, (seen, float("nan"), values))
    at_i = call(aten.unsqueeze.default, (values, -1))  # [..., n, 1]
    hit = call(aten.eq.Tensor, (row, at_i))
    if dtype.is_floating_point:  # NaN ties NaN
        both = call(aten.logical_and.default, (nan_row, call(aten.isnan.default, (at_i,))))
        hit = call(aten.logical_or.default, (hit, both))
    hit = call(aten.logical_and.default, (hit, mask))
    last_hit = call(aten.amax.default, (call(aten.where.ScalarOther, (hit, j, -1)), [-1]))
    indices = call(aten.transpose.int, (last_hit, dim, last))
    # the element at the index, as torch's kernel keeps it: -0.0 or 0.0 as eager (a reduction picks either)
    values = call(aten.transpose.int, (call(aten.gather.default, (along, -1, last_hit)), dim, last))
    if dtype == torch.bool:
        values = call(aten.ne.Scalar, (values, 0))
    return new, values, indices


def _identity(dtype: torch.dtype, largest: bool) -> float | int | bool:
    """The value no element loses to: the fill past i."""
    if dtype.is_floating_point:
        return -math.inf if largest else math.inf
    if dtype == torch.bool:
        return 0 if largest else 1  # computed in int32
    info = torch.iinfo(dtype)
    return info.min if largest else info.max
