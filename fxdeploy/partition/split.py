"""Cut the graph where ncnn's engine cannot run it: host stages between engine stages.

The *host* nodes are each ``multiclass_nms`` and everything that depends on it, and the ops that
ncnn has no layer for (top-k, sort, gather, indexing by a computed index, nonzero) wherever they
read the inputs: a DETR-style query selection in mid-network. With them go the comparisons,
casts, argmaxes and views that feed only host nodes (a keep mask made into NMS scores, a
per-level candidate selection), and the views and elementwise ops computed from host values for
host nodes only (the index expanded between a top-k and its gather; Faster R-CNN's level offsets
on the top-k's indices, and the sigmoid, clip and size test of the proposals it gathered). Every
other node runs on the engine.

Nodes are put in stages 0, 1, 2, ... (engine stages even, host stages odd), each in the first
stage of its kind at or after the stages of its inputs, so a detector whose NMS is last gets two
stages (the engine head, the host tail) and RT-DETR gets four (encoder, query selection, decoder,
postprocess). Values a stage needs that no stage can hand over are copied into it: sizes, and
values made without the inputs (anchors, resize ratios), which have no batch axis, while ncnn's
engine outputs are per image. The result is a GraphModule with one submodule per stage, called in
order, so the passed graph still runs in PyTorch (verification) and a lowering finds the stages
with ``split_parts``.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch.fx import Graph, GraphModule, Node

from fxdeploy.passes.base import PassResult
from fxdeploy.settings import Settings

STAGE = "stage_"
"""Submodules ``stage_0``, ``stage_1``, ...: engine stages even, host stages odd."""
_NMS = "fxdeploy::multiclass_nms"

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
_WRITES = frozenset({_aten.empty_like, _aten.copy_, _aten.copy})
"""A buffer made to be written into and the writes into it (Ultralytics' in-place xywh2xyxy of
the selected rows): on host values they run on the host; a write has no users of its own."""
_FROM_SIZES = frozenset({
    _aten.arange, _aten.ones, _aten.zeros, _aten.full, _aten.linspace, _aten.eye, _aten.new_ones,
    _aten.new_zeros, _aten.new_full,
})
"""Ops that make a tensor from sizes alone (not ``empty``, which is made to be written into, nor a
0-d ``scalar_tensor`` of a size, which the lowering traces)."""

_SIZES = (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)

Source = tuple[str | int, int]
"""Where a value comes from: ("input", i) a graph input, (s, k) output k of stage s."""


@dataclass(frozen=True)
class Stage:
    kind: str
    """"engine" or "host"."""
    module: GraphModule
    inputs: list[Source]


@dataclass(frozen=True)
class SplitParts:
    stages: list[Stage]
    outputs: list[Source]

    @property
    def head(self) -> GraphModule:
        return self.stages[0].module

    @property
    def tail(self) -> GraphModule:
        return self.stages[-1].module


def host_postprocess_split(gm: GraphModule, settings: Settings) -> PassResult:
    if hasattr(gm, f"{STAGE}0"):
        return PassResult(gm, False)
    free = _input_free(gm)
    host = _host_nodes(gm, free)
    if not host:
        return PassResult(gm, False)
    output = next(n for n in gm.graph.nodes if n.op == "output")
    finals = list(output.args[0])
    copied = (free | {n for n in gm.graph.nodes if isinstance(n.meta.get("val"), _SIZES)}) - set(finals)
    compute = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]
    stage_of = _stage_numbers(compute, host, copied)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    count = max(stage_of.values()) + 1
    members = [[n for n in compute if stage_of.get(n) == s] for s in range(count)]
    members = [_with_copies(nodes, copied) for nodes in members]
    inputs = [_unique(a for n in nodes for a in n.all_input_nodes if a not in inside and a.op != "get_attr")
              for nodes, inside in ((nodes, set(nodes)) for nodes in members)]
    rebound = [_rebind_sizes(members[s], inputs[s]) if s % 2 == 0 and s > 0 else {} for s in range(count)]
    outputs = [
        _unique([a for t in range(s + 1, count) for a in inputs[t] if stage_of.get(a) == s]
                + [f for f in finals if isinstance(f, Node) and stage_of.get(f) == s])
        for s in range(count)
    ]
    lifted = _lifted(placeholders, outputs, finals)
    for s in range(count):
        setattr(gm, f"{STAGE}{s}", _part(gm, members[s], inputs[s], outputs[s], rebound[s], lifted))
    gm.graph = _wire(placeholders, inputs, outputs, finals)
    gm.delete_all_unused_submodules()
    return PassResult(gm, True)


def split_parts(gm: GraphModule) -> SplitParts | None:
    """Read back how ``host_postprocess_split`` wired the stages; None when it did not fire."""
    if not hasattr(gm, f"{STAGE}0"):
        return None
    position = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
    sources: dict[Node, Source] = {n: ("input", i) for n, i in position.items()}
    stages: list[Stage] = []
    for node in gm.graph.nodes:
        if node.op != "call_module":
            continue
        s = int(str(node.target).removeprefix(STAGE))
        stages.append(Stage("host" if s % 2 else "engine", getattr(gm, node.target), [sources[a] for a in node.args]))
        for user in node.users:
            sources[user] = (s, int(user.args[1]))
    output = next(n for n in gm.graph.nodes if n.op == "output")
    return SplitParts(stages, [sources[a] for a in output.args[0]])


def _host_nodes(gm: GraphModule, free: set[Node]) -> set[Node]:
    nms = [n for n in gm.graph.nodes if n.op == "call_function" and getattr(n.target, "_name", "") == _NMS]
    seeds = [n for n in gm.graph.nodes if _packet(n) in _SELECTIONS and n not in free]
    made = _made_from_sizes(gm, free)
    if not nms and not seeds:
        return made
    after = _descendants(nms + seeds)
    seeds += [n for n in after if _packet(n) in _BY_INDEX]
    host = _descendants(nms) | set(seeds)
    host |= _host_only_inputs(host)
    return _host_fed_only_host(gm, host, free) | made


def _made_from_sizes(gm: GraphModule, free: set[Node]) -> set[Node]:
    """Tensors made from run-time image sizes (an ``arange`` over a feature map's width, a mask of
    ones of the image's size) and what is computed from them, sizes and weights alone: position
    embeddings, anchors, masks. ncnn has no layers for making them, and pnnx folds them into
    constants only at a fixed size, so with a dynamic height/width they run on the host and reach
    the engine as inputs. With only the batch dynamic, the engine is traced at one image and pnnx
    folds them, so nothing is taken."""
    placeholders = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    if not any(isinstance(v, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in v.shape[1:])
               for v in placeholders):
        return set()
    made: set[Node] = set()
    for node in gm.graph.nodes:
        value = node.meta.get("val")
        tensors = value if isinstance(value, (list, tuple)) else [value]  # meshgrid makes a list
        if (node.op != "call_function" or node in free or _random(node)
                or not tensors or not all(isinstance(t, torch.Tensor) for t in tensors)):
            continue
        inputs = node.all_input_nodes
        if not all(a in made or a in free or a.op == "get_attr" or isinstance(a.meta.get("val"), _SIZES)
                   for a in inputs):
            continue
        if _packet(node) in _FROM_SIZES or any(a in made for a in inputs):
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
        if node in host or node in pulled or _packet(node) not in _MOVABLE:
            continue
        if all(u in host or u in pulled for u in node.users):
            pulled.add(node)
            stack.extend(node.all_input_nodes)
    views = {n for n in pulled if _packet(n) in _VIEWS}
    while True:  # a view with no moved op behind it stays in the engine
        alone = {v for v in views if not any(a in pulled or a in host for a in v.all_input_nodes)}
        if not alone:
            return pulled
        pulled -= alone
        views -= alone


def _host_fed_only_host(gm: GraphModule, host: set[Node], free: set[Node]) -> set[Node]:
    """Add what is computed after host values for host nodes only: an engine stage there would
    only pass values back and forth. That is each view or host-only op, and each elementwise op
    that reads no engine value (an offset added to a top-k's indices; the sigmoid, clip and size
    test of gathered proposals before their NMS). An item of a host node's outputs is the host's
    too: a stage hands over tensors, not tuples. Other compute after a host node stays on an
    engine: layers with weights (a decoder on gathered queries), and anything that reads an engine
    value (DETR's whole decoder reads a mask)."""
    after = _descendants(list(host)) - host
    host = set(host) | {n for n in after if _packet(n) is operator.getitem and n.args[0] in host}
    engine_free = set(host)  # computed from host values, sizes and weights only
    for node in gm.graph.nodes:
        if node in after and all(a in engine_free or a in free or a.op == "get_attr"
                                 or isinstance(a.meta.get("val"), _SIZES) for a in node.all_input_nodes):
            engine_free.add(node)
    changed = True
    while changed:
        changed = False
        for node in reversed(gm.graph.nodes):
            writes = _packet(node) in _WRITES
            if node not in after or node in host or not (node.users or writes):
                continue
            if not all(u in host for u in node.users):
                continue
            if _packet(node) in _MOVABLE or (node in engine_free and (
                    _pointwise(node) or _packet(node) in _REDUCE or writes)):
                host.add(node)
                changed = True
    return host


def _pointwise(node: Node) -> bool:
    return node.op == "call_function" and torch.Tag.pointwise in getattr(node.target, "tags", ())


def _packet(node: Node) -> object:
    """The op a call node runs, overloads aside (``aten.topk`` for ``aten.topk.default``)."""
    if node.op != "call_function":
        return None
    return operator.getitem if node.target is operator.getitem else getattr(node.target, "overloadpacket", None)


def _stage_numbers(compute: list[Node], host: set[Node], copied: set[Node]) -> dict[Node, int]:
    """Engine stages even, host stages odd; a copied value has no stage of its own, but the
    stages of the values it is computed from still count (a size of a host tensor)."""
    stage_of: dict[Node, int] = {}
    reach: dict[Node, int] = {}
    for node in compute:
        base = max((reach[a] for a in node.all_input_nodes if a in reach), default=0)
        if node in copied:
            reach[node] = base
            continue
        stage_of[node] = base + int((base % 2 == 1) != (node in host))
        reach[node] = stage_of[node]
    return _engine_work_late(compute, stage_of)


def _engine_work_late(compute: list[Node], stage_of: dict[Node, int]) -> dict[Node, int]:
    """Engine work that only a later engine stage reads moves into that stage, so that the
    stages hand over the values it starts from (the encoder's memory, per image) rather than
    what is derived from them (the memory split into heads, batch times heads on dim 0, which an
    engine that runs per image cannot hand over)."""
    needed: dict[Node, float] = {}
    for node in reversed(compute):
        users = [stage_of.get(u, needed.get(u, float("inf"))) for u in node.users if u.op != "output"]
        needed[node] = min(users, default=float("inf"))
        stage = stage_of.get(node)
        if _packet(node) is operator.getitem:  # an item of a tuple stays where the tuple is made
            continue
        if stage is not None and stage % 2 == 0 and needed[node] != float("inf"):
            latest = int(needed[node]) - int(needed[node]) % 2
            if latest > stage:
                stage_of[node] = latest
                needed[node] = latest
    return stage_of


def _with_copies(nodes: list[Node], copied: set[Node]) -> list[Node]:
    """``nodes`` and the copied values they need, in graph order."""
    chosen = set(nodes)
    stack = [a for n in nodes for a in n.all_input_nodes]
    while stack:
        node = stack.pop()
        if node in chosen or node not in copied:
            continue
        chosen.add(node)
        stack.extend(node.all_input_nodes)
    graph_order = {n: i for i, n in enumerate(next(iter(chosen)).graph.nodes)} if chosen else {}
    return sorted(chosen, key=graph_order.__getitem__)


def _rebind_sizes(nodes: list[Node], inputs: list[Node]) -> dict[Node, tuple[Node, int]]:
    """An engine stage after the first gets no input that it reads only for sizes: each such size
    is read from another of its inputs with the same symbolic dim (the batch, from any per-image
    value), and the input is dropped from ``inputs``. ncnn would otherwise take a whole image per
    call, unused. Returns the sizes to read elsewhere: sym_size node -> (input, dim)."""
    rebound: dict[Node, tuple[Node, int]] = {}
    inside = set(nodes)
    for tensor in list(inputs):
        users = [u for u in tensor.users if u in inside]
        if not users or not all(u.target is _aten.sym_size.int for u in users):
            continue
        found = {u: _same_dim(u, [i for i in inputs if i is not tensor]) for u in users}
        if all(found.values()):
            rebound.update(found)
            inputs.remove(tensor)
    return rebound


def _same_dim(size: Node, candidates: list[Node]) -> tuple[Node, int] | None:
    expr = size.meta["val"].node.expr if isinstance(size.meta.get("val"), torch.SymInt) else None
    for node in candidates:
        value = node.meta.get("val")
        if expr is None or not isinstance(value, torch.Tensor):
            continue
        for dim, other in enumerate(value.shape):
            if isinstance(other, torch.SymInt) and other.node.expr == expr:
                return node, dim
    return None


def _input_free(gm: GraphModule) -> set[Node]:
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


def _lifted(placeholders: list[Node], outputs: list[list[Node]], finals: list[object]) -> set[Node]:
    """Engine outputs of a one-image graph (a per-image capture: every input's batch is 1) that
    have no batch axis, because the model picked its image (``scores[i]``) before the host's work.
    ncnn's engine returns blobs per image, so the engine stage hands them over with a leading 1."""
    values = [p.meta.get("val") for p in placeholders]
    if not values or not all(isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == 1 for v in values):
        return set()
    def lacks_batch(node: Node) -> bool:
        value = node.meta.get("val")
        return isinstance(value, torch.Tensor) and (value.dim() == 0 or value.shape[0] != 1)
    return {n for s in range(0, len(outputs), 2) for n in outputs[s] if lacks_batch(n) and n not in finals}


def _part(
    gm: GraphModule, nodes: list[Node], inputs: list[Node], outputs: list[Node],
    rebound: dict[Node, tuple[Node, int]], lifted: set[Node],
) -> GraphModule:
    """A standalone GraphModule of ``nodes``; weights are copied in as attributes, not inputs.
    A ``lifted`` value travels between stages with a leading 1 (see ``_lifted``)."""
    graph = Graph()
    env: dict[Node, Node] = {}
    for node in inputs:
        env[node] = graph.placeholder(node.name)
        env[node].meta = dict(node.meta)
    for node in set(inputs) & lifted:  # placeholders first: a call named before one takes its name
        env[node].meta["val"] = node.meta["val"].unsqueeze(0)
        env[node] = graph.call_function(_aten.squeeze.dim, (env[node], 0))
        env[node].meta = dict(node.meta)
    for node in nodes:
        for attr in node.all_input_nodes:
            if attr.op == "get_attr" and attr not in env:
                env[attr] = graph.node_copy(attr)
        if node in rebound:  # the same size, read from another input
            source, dim = rebound[node]
            env[node] = graph.call_function(node.target, (env[source], dim))
            env[node].meta = dict(node.meta)
        else:
            env[node] = graph.node_copy(node, lambda a: env[a])
    for node in set(outputs) & lifted:
        env[node] = graph.call_function(_aten.unsqueeze.default, (env[node], 0))
        env[node].meta = dict(node.meta, val=node.meta["val"].unsqueeze(0))
    graph.output(tuple(env[n] for n in outputs))
    part = GraphModule(gm, graph)
    part.eval()
    return part


def _wire(placeholders: list[Node], inputs: list[list[Node]], outputs: list[list[Node]], finals: list[object]) -> Graph:
    graph = Graph()
    env: dict[Node, Node] = {}
    for node in placeholders:
        env[node] = graph.placeholder(node.name)
        env[node].meta = dict(node.meta)
    for s, (needed, made) in enumerate(zip(inputs, outputs, strict=True)):
        call = graph.call_module(f"{STAGE}{s}", tuple(env[n] for n in needed))
        for k, node in enumerate(made):
            env[node] = graph.call_function(operator.getitem, (call, k))
            env[node].meta = dict(node.meta)
    for node in finals:
        if isinstance(node, Node) and node not in env:  # a weight returned as is
            env[node] = graph.node_copy(node)
    graph.output(tuple(env[f] if isinstance(f, Node) else f for f in finals))
    return graph


def _unique(nodes: Iterable[Node]) -> list[Node]:
    return list(dict.fromkeys(nodes))
