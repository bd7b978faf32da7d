"""``scatter_reduce`` with ``mean``, a float ``amax``/``amin`` without ``self``, and ``scatter(reduce=...)``,
in torch's values.

torch.onnx's translation writes ``scatter_reduce(..., "mean")`` as a plain ``ScatterElements``
(ONNX has no mean reduction): the last value written wins. A per-voxel or per-class mean
(``zeros.scatter_reduce(1, cell, feats, "mean", include_self=False)``) came out 1.39 off on ONNX
Runtime and OpenVINO, and lower()'s check refused it with no way round. It is a sum divided by a
count: the count a scatter-add of ones (plus one where ``include_self``), at least 1, so an index
never written keeps ``self``; integers are divided with floor rounding, as torch does.

For ``include_self=False`` the translation first sets the written positions to the lowest (highest)
float, so where every value written is -inf (a segment of masked scores) ``amax`` gave
-3.4028235e38 where torch gives -inf. Here the written positions are set to -inf (+inf) by a
plain scatter of that constant, and the reduction then includes them: the same maximum, -inf kept.

``scatter(dim, index, src, reduce="add" | "multiply")`` (the older spelling, still in user code) had
no translation at all ("No ONNX function found for aten.scatter.reduce"). By torch's definition it
writes ``self[index] += src`` (``*=``), every index in turn: ``scatter_reduce`` with ``sum``
(``prod``) and ``include_self=True``, which ONNX's ``ScatterElements`` reductions compute. A scalar
``value`` is a tensor of it, shaped as ``index``.
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import fill_meta
from fxdeploy.settings import Settings

aten = torch.ops.aten
SCATTER_REDUCE = aten.scatter_reduce.two
OLD_SPELLING = (aten.scatter.reduce, aten.scatter.value_reduce)
AS_REDUCE = {"add": "sum", "multiply": "prod"}
START = {"amax": float("-inf"), "amin": float("inf")}


def scatter_reductions(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if check(node) is not None:
            continue
        new: list[torch.fx.Node] = []
        with gm.graph.inserting_before(node):
            if node.target in OLD_SPELLING:
                result = _as_scatter_reduce(gm.graph, new, node)
            elif node.args[4] == "mean":
                result = _mean(gm.graph, new, node)
            else:
                result = _extremum(gm.graph, new, node)
        fill_meta(new)
        node.replace_all_uses_with(result)
        gm.graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def check(node: torch.fx.Node) -> str | None:
    """None where ``node`` is a ``scatter_reduce`` whose ONNX translation is not torch's, or a
    ``scatter`` with ``reduce``, which has none; else why not."""
    if node.op == "call_function" and node.target in OLD_SPELLING:
        reduce = node.kwargs.get("reduce", node.args[4] if len(node.args) > 4 else None)
        return None if reduce in AS_REDUCE else f"scatter with reduce={reduce!r}, which torch does not define"
    if node.op != "call_function" or node.target != SCATTER_REDUCE:
        return "not a scatter_reduce"
    reduce, include_self = node.args[4], _include_self(node)
    if reduce == "mean":
        return None
    if reduce in START and not include_self:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return None
        return f"an integer {reduce}: the translation's lowest (highest) integer is torch's start"
    return f"{reduce} with include_self={include_self} is ONNX's own reduction"


def _include_self(node: torch.fx.Node) -> bool:
    return node.args[5] if len(node.args) > 5 else node.kwargs.get("include_self", True)


def _mean(graph: torch.fx.Graph, new: list[torch.fx.Node], node: torch.fx.Node) -> torch.fx.Node:
    """``sum / max(count, 1)``, the count of values written (plus ``self`` where included)."""
    self, dim, index, src = node.args[:4]
    include_self = _include_self(node)

    def call(op: object, *args: object, **kwargs: object) -> torch.fx.Node:
        new.append(graph.call_function(op, args, kwargs))
        return new[-1]

    total = call(SCATTER_REDUCE, self, dim, index, src, "sum", include_self=include_self)
    ones = call(aten.ones_like.default, src)
    written = call(aten.scatter_add.default, call(aten.zeros_like.default, self), dim, index, ones)
    count = call(aten.add.Tensor, written, 1) if include_self else call(aten.clamp_min.default, written, 1)
    if node.meta["val"].is_floating_point():
        return call(aten.div.Tensor, total, count)
    return call(aten.div.Tensor_mode, total, count, rounding_mode="floor")


def _extremum(graph: torch.fx.Graph, new: list[torch.fx.Node], node: torch.fx.Node) -> torch.fx.Node:
    """The written positions start at -inf (amax) or +inf (amin); then the reduction includes them."""
    self, dim, index, src, reduce = node.args[:5]
    new.append(graph.call_function(aten.scatter.value, (self, dim, index, START[reduce])))
    new.append(graph.call_function(SCATTER_REDUCE, (new[-1], dim, index, src, reduce), {"include_self": True}))
    return new[-1]


def _as_scatter_reduce(graph: torch.fx.Graph, new: list[torch.fx.Node], node: torch.fx.Node) -> torch.fx.Node:
    """``scatter(..., reduce=r)``: ``scatter_reduce`` of ``AS_REDUCE[r]``, ``self`` included."""
    self, dim, index, src = node.args[:4]
    reduce = node.kwargs.get("reduce", node.args[4] if len(node.args) > 4 else None)
    if node.target == aten.scatter.value_reduce:
        dtype = node.meta["val"].dtype
        new.append(graph.call_function(aten.full_like.default, (index, src), {"dtype": dtype}))
        src = new[-1]
    new.append(graph.call_function(SCATTER_REDUCE, (self, dim, index, src, AS_REDUCE[reduce]), {"include_self": True}))
    return new[-1]
