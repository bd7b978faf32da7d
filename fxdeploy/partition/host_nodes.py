"""Which nodes of a graph run on the host when ncnn's engine runs the rest, and why.

The *host* nodes are each ``multiclass_nms`` and everything that depends on it, and the ops that
ncnn has no layer for (top-k, sort, gather, indexing by a computed index, nonzero) wherever they
read the inputs: a DETR-style query selection in mid-network. With them go the comparisons,
casts, argmaxes and views that feed only host nodes (a keep mask made into NMS scores, a
per-level candidate selection), and the views and elementwise ops computed from host values for
host nodes only (the index expanded between a top-k and its gather; Faster R-CNN's level offsets
on the top-k's indices, and the sigmoid, clip and size test of the proposals it gathered). With a
dynamic height/width, tensors made from run-time sizes go too. So do a stepped write (pnnx
spells it wrong), a max or min over windows the graph can fill with an infinity (ncnn gives the
lowest or highest finite float where eager gives the infinity: ``infinite_windows``), and the nodes
the ncnn lowering marks (``FORCED``: their op has no ncnn layer in pnnx). Every other node runs on
the engine. Each host node gets the reason it is there, which the lowering report shows.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule, Node

from fxdeploy.ops.names import MULTICLASS_NMS, is_nms
from fxdeploy.partition.host_reasons import (
    AFTER_NMS,
    BETWEEN_HOST_OPS,
    FORCED,
    INFINITE_WINDOW,
    INTEGER_ON_HOST,
    MADE_FROM_SIZES,
    NO_ARGMAX_LAYER,
    NO_AXIS_LAYER,
    NO_GATHER_LAYER,
    NO_NMS_LAYER,
    NO_SELECTION_LAYER,
    STEPPED_WRITE,
)
from fxdeploy.passes.graph_utils import attribute
from fxdeploy.passes.infinite_windows import check as infinite_window
from fxdeploy.passes.infinite_windows import infinities

_aten = torch.ops.aten
_SELECTIONS = frozenset({_aten.topk, _aten.sort, _aten.argsort, _aten.nonzero, _aten.scatter, _aten.cumsum})
"""Ops ncnn has no layer for, whose results depend on the values: they run on the host wherever
they read the inputs. On values made without the inputs, pnnx folds them into constants. A
selection that pad_compactions made static reorders rows by a cumsum and a scatter."""
_BY_INDEX = frozenset({_aten.gather, _aten.index, _aten.index_select})
"""Neither has an ncnn layer; pnnx folds one whose index is fixed (a mask made from the input's
size), so only one that reads a host value (the indices of a top-k) runs on the host."""
_HOST_ONLY = frozenset({
    _aten.gt, _aten.ge, _aten.lt, _aten.le, _aten.eq, _aten.ne, _aten.where, _aten.logical_and,
    _aten.logical_or, _aten.logical_xor, _aten.logical_not, _aten.bitwise_not, _aten.to, _aten._to_copy,
    _aten.argmax, _aten.argmin, _aten.topk, _aten.sort, _aten.zeros_like, _aten.ones_like, _aten.full_like,
    _aten.__and__, _aten.__or__, _aten.bitwise_and, _aten.bitwise_or,
})
"""Ops without an ncnn layer (its ArgMax reduces the whole blob, not an axis; it has no TopK or
sort): where they feed only host nodes, they run on the host with them. A candidate selection
ahead of the NMS (the k-th best score per level, and the scores below it zeroed) is made of them."""
_VIEWS = frozenset({
    _aten.unsqueeze, _aten.squeeze, _aten.view, _aten.reshape, _aten._unsafe_view, _aten.slice,
    _aten.select, _aten.flatten, _aten.expand, _aten.repeat, _aten.view_as, _aten.cat, _aten.stack, operator.getitem,
    _aten.split, _aten.split_with_sizes, _aten.unbind, _aten.chunk,
})
"""Moved with those ops when between them and a host node, never on their own (``getitem`` picks
one output of a multi-output op, topk's values; ``cat`` and ``stack`` join per-level selections or
box corners; ``repeat`` expands a top-k's indices for a gather)."""
_MOVABLE = _HOST_ONLY | _VIEWS
_REDUCE = frozenset({_aten.max, _aten.min, _aten.amax, _aten.amin, _aten.sum})
"""Reductions that stay on the host where they read host values only (batched_nms's class offset:
the largest coordinate of the candidate boxes)."""
_WRITES = frozenset({
    _aten.empty_like, _aten.copy_, _aten.copy, _aten.fill, _aten.slice_scatter, _aten.select_scatter, _aten.index_put,
})
"""A buffer made to be written into and the writes into it (Ultralytics' xywh2xyxy of the selected
rows; in a functional graph, YOLOv5's ``y = x.clone(); y[:, 0] = ...`` is a ``copy`` and a
``select_scatter``): on host values they run on the host. On ncnn, ``scatters_as_slices`` has made
most of them slices and a ``cat`` before the cut; what it refuses (a stepped write, an
``index_put``) is found here."""
_FROM_SIZES = frozenset({
    _aten.arange, _aten.ones, _aten.zeros, _aten.full, _aten.linspace, _aten.eye, _aten.new_ones,
    _aten.new_zeros, _aten.new_full,
})
"""Ops that make a tensor from sizes alone (not ``empty``, which is made to be written into, nor a
0-d ``scalar_tensor`` of a size, which the lowering traces)."""
_CUTS = frozenset({_aten.slice, _aten.narrow})
"""Ops that cut a constant to a run-time size (BERT's position embeddings looked up, to the sequence
length). Not a parameter: pnnx keeps a parameter's slice by a size dynamic, and folds a buffer's."""

_UNTAGGED_POINTWISE = frozenset({_aten.floor_divide, _aten.triu, _aten.tril})
_INDICES = frozenset({_aten.argmax, _aten.argmin})
"""An index along one axis: ncnn's ArgMax reduces the whole blob, and pnnx leaves these unconverted
wherever they are. On the host from the start, with the integer arithmetic on them (a heatmap
peak's column and row, ``idx % w`` and ``idx // w``: ncnn has no integers, its remainder rounds to
nearest, and pnnx writes a floor division by a run-time size as an expression ncnn cannot run)."""

SIZES = (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)

def host_nodes(gm: GraphModule, free: set[Node]) -> dict[Node, str]:
    """The nodes that run on the host, each with why (one of the reasons above); ``free`` are the
    nodes computed without the inputs (``input_free``)."""
    nms = [n for n in gm.graph.nodes if is_nms(n, (MULTICLASS_NMS,))]
    forced = {n: n.meta[FORCED] for n in gm.graph.nodes if FORCED in n.meta}
    forced.update((n, STEPPED_WRITE) for n in gm.graph.nodes if _stepped_write(n) and n not in free)
    holds = infinities(gm)
    for node in (n for n in gm.graph.nodes if n not in free and infinite_window(n, holds) is None):
        forced.setdefault(node, INFINITE_WINDOW)
    forced.update((n, NO_ARGMAX_LAYER) for n in gm.graph.nodes if packet(n) in _INDICES and n not in free)
    seeds = [n for n in gm.graph.nodes if (packet(n) in _SELECTIONS and n not in free) or n in forced]
    reasons = dict.fromkeys(_made_from_sizes(gm, free), MADE_FROM_SIZES)
    if not nms and not seeds:
        return reasons
    after = _descendants(nms + seeds)
    seeds += [n for n in after if packet(n) in _BY_INDEX]
    after_nms = _descendants(nms)
    host = after_nms | set(seeds)
    host |= _host_only_inputs(host)
    integers: set[Node] = set()
    for node in _host_fed_only_host(gm, host, free, set(reasons), integers):
        reasons[node] = forced.get(node) or (INTEGER_ON_HOST if node in integers else _why(node, after_nms))
    return reasons


def _stepped_write(node: Node) -> bool:
    if packet(node) is not _aten.slice_scatter:
        return False
    return (node.args[5] if len(node.args) > 5 else node.kwargs.get("step", 1)) != 1


def _why(node: Node, after_nms: set[Node]) -> str:
    if is_nms(node, (MULTICLASS_NMS,)):
        return NO_NMS_LAYER
    if packet(node) in _SELECTIONS:
        return NO_SELECTION_LAYER
    if packet(node) in _BY_INDEX:
        return NO_GATHER_LAYER
    if node in after_nms:
        return AFTER_NMS
    return NO_AXIS_LAYER if packet(node) in _HOST_ONLY else BETWEEN_HOST_OPS


def _made_from_sizes(gm: GraphModule, free: set[Node]) -> set[Node]:
    """Tensors made from run-time image sizes (an ``arange`` over a feature map's width, a mask of
    ones of the image's size) and what is computed from them, sizes and weights alone: position
    embeddings, anchors, masks. ncnn has no layers for making them, and pnnx folds them into
    constants only at a fixed size, so with a dynamic height/width they run on the host and reach
    the engine as inputs. With only the batch dynamic, the engine is traced at one image and pnnx
    folds them, so nothing is taken but what is made from the batch (an ``arange`` over the rows):
    at one image it would be made for a batch of one."""
    placeholders = [v for n in gm.graph.nodes if n.op == "placeholder" for v in [n.meta.get("val")]
                    if isinstance(v, torch.Tensor) and v.dim()]
    sized = any(isinstance(d, torch.SymInt) for v in placeholders for d in v.shape[1:])
    batch = {s for v in placeholders if isinstance(v.shape[0], torch.SymInt) for s in v.shape[0].node.expr.free_symbols}
    made: set[Node] = set()
    for node in gm.graph.nodes:
        value = node.meta.get("val")
        tensors = value if isinstance(value, (list, tuple)) else [value]  # meshgrid makes a list
        if (node.op != "call_function" or node in free or _random(node)
                or not tensors or not all(isinstance(t, torch.Tensor) for t in tensors)):
            continue
        inputs = node.all_input_nodes
        if not all(a in made or a in free or a.op == "get_attr" or isinstance(a.meta.get("val"), SIZES)
                   for a in inputs):
            continue
        cut = (packet(node) in _CUTS and any(isinstance(a.meta.get("val"), SIZES) for a in inputs)
               and not _parameter(gm, node.args[0]))
        from_batch = any(isinstance(v := a.meta.get("val"), torch.SymInt) and v.node.expr.free_symbols & batch
                         for a in inputs)
        if ((packet(node) in _FROM_SIZES or cut) and (sized or from_batch)) or any(a in made for a in inputs):
            made.add(node)  # an in-place write into one of them too (RT-DETR's grid_xy[..., 0] /= width)
    written = [n for n in gm.graph.nodes if n.op == "call_function" and _mutates(n) and n not in made]
    if any(a in made for n in written for a in n.all_input_nodes):
        return set()  # one would be written into by what runs on the engine: leave them all there
    return made


def _descendants(roots: list[Node]) -> set[Node]:
    seen: set[Node] = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node in seen or node.op == "output":
            continue
        seen.add(node)
        stack.extend(node.users)
    return seen


def _host_only_inputs(host: set[Node]) -> set[Node]:
    """The ``_HOST_ONLY`` ops (and the views after them) computing host inputs, for the host alone."""
    pulled: set[Node] = set()
    stack = [a for n in host for a in n.all_input_nodes]
    while stack:
        node = stack.pop()
        if node in host or node in pulled or packet(node) not in _MOVABLE:
            continue
        if all(u in host or u in pulled for u in node.users):
            pulled.add(node)
            stack.extend(node.all_input_nodes)
    views = {n for n in pulled if packet(n) in _VIEWS}
    while True:  # a view with no moved op behind it stays in the engine
        alone = {v for v in views if not any(a in pulled or a in host for a in v.all_input_nodes)}
        if not alone:
            return pulled
        pulled -= alone
        views -= alone


def _host_fed_only_host(gm: GraphModule, host: set[Node], free: set[Node], sized: set[Node],
                        integers: set[Node]) -> set[Node]:
    """Add what is computed after host values for host nodes only: an engine stage there would
    only pass values back and forth. That is each view or host-only op, and each elementwise op
    that reads no engine value (an offset added to a top-k's indices; the sigmoid, clip and size
    test of gathered proposals before their NMS), or for the graph's outputs (CenterNet's class and
    position of each top-k peak, from its index). An item of a host node's outputs is the host's
    too: a stage hands over tensors, not tuples. Other compute after a host node stays on an
    engine: layers with weights (a decoder on gathered queries), and anything that reads an engine
    value (DETR's whole decoder reads a mask). Integer and bool values computed from host values and
    ``sized`` tensors go whoever reads them (into ``integers``): a float cast takes them to the engine."""
    after = _descendants(list(host)) - host
    host = set(host) | {n for n in after if packet(n) is operator.getitem and n.args[0] in host}
    engine_free = set(host) | sized  # computed from host values, sizes and weights only
    for node in gm.graph.nodes:
        if node in after and all(a in engine_free or a in free or a.op == "get_attr"
                                 or isinstance(a.meta.get("val"), SIZES) for a in node.all_input_nodes):
            engine_free.add(node)
    changed = True
    while changed:
        changed = False
        for node in reversed(gm.graph.nodes):
            writes = packet(node) in _WRITES
            if node not in after or node in host or not node.users:
                continue
            if node in engine_free and _integer(node):
                host.add(node)  # whoever reads it: ncnn's float engine would compute it otherwise
                integers.add(node)
                changed = True
                continue
            if not all(u in host or (u.op == "output" and node in engine_free) for u in node.users):
                continue
            if packet(node) in _MOVABLE or (node in engine_free and (
                    _pointwise(node) or packet(node) in _REDUCE or writes)):
                host.add(node)
                changed = True
    return host


def _integer(node: Node) -> bool:
    """Integer or bool values (a comparison's, a pad of them): ncnn's engine has floats only."""
    value = node.meta.get("val")
    return isinstance(value, torch.Tensor) and not value.is_floating_point() and not value.is_complex()


def _pointwise(node: Node) -> bool:
    """Elementwise: tagged so, or ``floor_divide`` (``index // width``) and ``triu``/``tril`` (each
    element kept or zeroed by its position alone: YOLOv8-OBB's fast NMS, ``probiou(b, b).triu_(1)``),
    which torch leaves untagged."""
    if node.op != "call_function":
        return False
    return torch.Tag.pointwise in getattr(node.target, "tags", ()) or packet(node) in _UNTAGGED_POINTWISE


def packet(node: Node) -> object:
    """The op a call node runs, overloads aside (``aten.topk`` for ``aten.topk.default``)."""
    if node.op != "call_function":
        return None
    return operator.getitem if node.target is operator.getitem else getattr(node.target, "overloadpacket", None)


def _parameter(gm: GraphModule, node: object) -> bool:
    return isinstance(attribute(gm, node), torch.nn.Parameter)


def input_free(gm: GraphModule) -> set[Node]:
    """Call nodes whose value does not depend on any input, and that compute it the same way on
    every call: nothing mutated in place, and no random op (on the host it would draw from the
    caller's torch generator on every call: left as it is, the lowering names it instead)."""
    free: set[Node] = set()
    mutated = {
        a for n in gm.graph.nodes if n.op == "call_function" and _mutates(n) for a in n.all_input_nodes
    }
    for node in gm.graph.nodes:
        if node.op != "call_function" or node in mutated or _mutates(node) or _random(node):
            continue
        if all(a in free or a.op == "get_attr" for a in node.all_input_nodes):
            free.add(node)
    return free


def _mutates(node: Node) -> bool:
    """``detach_`` only drops autograd history (export writes one after each ``torch.tensor(...)``)."""
    schema = getattr(node.target, "_schema", None)
    return bool(schema is not None and schema.is_mutable) and node.target is not _aten.detach_.default


def _random(node: Node) -> bool:
    return torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ())


