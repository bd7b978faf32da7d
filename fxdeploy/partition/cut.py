"""Cut the graph where ncnn's engine cannot run it: host stages between engine stages.

Which nodes go to the host, and why, is ``host_nodes``'s to say. Nodes are put in stages 0, 1,
2, ... (engine stages even, host stages odd), each in the first stage of its kind at or after the
stages of its inputs, so a detector whose NMS is last gets two stages (the engine head, the host
tail) and RT-DETR gets four (encoder, query selection, decoder, postprocess). Values a stage
needs that no stage can hand over are copied into it: sizes, and values made without the inputs
(anchors, resize ratios), which have no batch axis, while ncnn's engine outputs are per image.
The result is a GraphModule with one submodule per stage, called in order, so the passed graph
still runs in PyTorch (verification) and a lowering finds the stages with ``split_parts``. Each
host node keeps the reason it is there in ``node.meta[HOST_REASON]``.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch.fx import Graph, GraphModule, Node

from fxdeploy.partition.host_nodes import SIZES, host_nodes, input_free, packet
from fxdeploy.partition.host_reasons import FORCED, HOST_REASON
from fxdeploy.partition.plan import Source
from fxdeploy.passes.base import PassResult
from fxdeploy.settings import Settings

STAGE = "stage_"
"""Submodules ``stage_0``, ``stage_1``, ...: engine stages even, host stages odd."""
ORIGIN = "fxdeploy_origin"
"""``node.meta`` key: the name of the node in the graph before the cut, which its copy in a stage keeps."""
UNSPLIT = "fxdeploy_unsplit"
"""``gm.meta`` key: the graph before the cut (weights shared), for ``partition.recut`` to cut again."""
_aten = torch.ops.aten


@dataclass(frozen=True)
class Part:
    """One stage of the cut graph, before lowering: its GraphModule and where its inputs come from."""

    kind: str
    """"engine" or "host"."""
    module: GraphModule
    inputs: list[Source]


@dataclass(frozen=True)
class SplitParts:
    stages: list[Part]
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
    free = input_free(gm)
    reasons = host_nodes(gm, free)
    if not reasons:
        return PassResult(gm, False)
    for node in gm.graph.nodes:
        node.meta.setdefault(ORIGIN, node.name)
    unsplit = plain_copy(gm)
    for node, why in reasons.items():
        node.meta[HOST_REASON] = why  # node_copy takes it into the stage's module
    output = next(n for n in gm.graph.nodes if n.op == "output")
    finals = list(output.args[0])
    sizes = {n for n in gm.graph.nodes if isinstance(n.meta.get("val"), SIZES)}
    copied = (free | sizes | _input_views(gm)) - set(finals)
    copied -= {n for n in reasons if FORCED in n.meta}  # a value the engine cannot make, even from no input
    compute = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]
    stage_of = _stage_numbers(compute, set(reasons), copied)
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
    gm.meta[UNSPLIT] = unsplit
    return PassResult(gm, True)


def plain_copy(gm: GraphModule) -> GraphModule:
    """``gm`` with a graph of its own (nodes and their meta copied) and the same weights."""
    graph = Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    copy = GraphModule(gm, graph)
    copy.meta = {key: value for key, value in gm.meta.items() if key != UNSPLIT}
    return copy


def split_parts(gm: GraphModule) -> SplitParts | None:
    """Read back how ``host_postprocess_split`` wired the stages; None when it did not fire."""
    if not hasattr(gm, f"{STAGE}0"):
        return None
    position = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
    sources: dict[Node, Source] = {n: Source.graph_input(i) for n, i in position.items()}
    stages: list[Part] = []
    for node in gm.graph.nodes:
        if node.op != "call_module":
            continue
        s = int(str(node.target).removeprefix(STAGE))
        stages.append(Part("host" if s % 2 else "engine", getattr(gm, node.target), [sources[a] for a in node.args]))
        for user in node.users:
            sources[user] = Source(s, int(user.args[1]))
    output = next(n for n in gm.graph.nodes if n.op == "output")
    return SplitParts(stages, [sources[a] for a in output.args[0]])


def _stage_numbers(compute: list[Node], host: set[Node], copied: set[Node]) -> dict[Node, int]:
    """Engine stages even, host stages odd; a copied value has no stage of its own, but the
    stages of the values it is computed from still count (a size of a host tensor). An item of a
    tuple (``max.dim``'s values) is taken in the stage that makes the tuple."""
    stage_of: dict[Node, int] = {}
    reach: dict[Node, int] = {}
    for node in compute:
        base = max((reach[a] for a in node.all_input_nodes if a in reach), default=0)
        if packet(node) is operator.getitem and node.args[0] in stage_of:  # a stage hands over tensors, not tuples
            stage_of[node] = reach[node] = stage_of[node.args[0]]
            continue
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
        if packet(node) is operator.getitem:  # an item of a tuple stays where the tuple is made
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


_PURE_VIEWS = frozenset({
    _aten.unsqueeze, _aten.squeeze, _aten.view, _aten.reshape, _aten._unsafe_view, _aten.slice, _aten.select,
    _aten.flatten, _aten.expand, _aten.permute, _aten.transpose, _aten.alias,
})


def _input_views(gm: GraphModule) -> set[Node]:
    """Views of a model input (CLIP's ``input_ids.view(-1, L)``): each stage that reads one views the
    input itself, rather than an engine handing over the input's own values (per image, which a
    grouped input, several rows per image, is not)."""
    views: set[Node] = set()
    for node in gm.graph.nodes:
        if node.op != "call_function" or packet(node) not in _PURE_VIEWS or not isinstance(node.args[0], Node):
            continue
        rest = [a for a in node.all_input_nodes if a is not node.args[0]]
        if (node.args[0].op == "placeholder" or node.args[0] in views) and all(
                isinstance(a.meta.get("val"), SIZES) for a in rest):
            views.add(node)
    return views


def _unique(nodes: Iterable[Node]) -> list[Node]:
    return list(dict.fromkeys(nodes))
