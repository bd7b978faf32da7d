"""Cut the graph before NMS on targets whose engine cannot run it (ncnn).

The *head* (everything that does not depend on a ``multiclass_nms`` output) stays for the
engine; the *tail* (each ``multiclass_nms`` node and everything that depends on it) runs on the
host, inside the runtime layer, behind the same ``execute``. The tail also takes the comparisons,
selects, casts, argmaxes and top-ks that feed only the tail (a keep mask made into NMS scores, the
labels gathered after it, a per-level candidate selection): ncnn has no layer for them. Values the
tail needs that the engine cannot hand over are recomputed in the tail: sizes, and values made
without the inputs (anchors, resize ratios), which have no batch axis. The result is a GraphModule with two
submodules, ``engine_head`` and ``host_tail``, called one after the other, so the passed graph
still runs in PyTorch (verification) and a lowering finds both halves with ``split_parts``.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch.fx import Graph, GraphModule, Node

from fxdeploy.passes.base import PassResult
from fxdeploy.settings import Settings

HEAD = "engine_head"
TAIL = "host_tail"
_NMS = "fxdeploy::multiclass_nms"

_aten = torch.ops.aten
_HOST_ONLY = frozenset({
    _aten.gt, _aten.ge, _aten.lt, _aten.le, _aten.eq, _aten.ne, _aten.where, _aten.logical_and,
    _aten.logical_or, _aten.logical_xor, _aten.logical_not, _aten.bitwise_not, _aten.to, _aten._to_copy,
    _aten.argmax, _aten.argmin, _aten.topk, _aten.sort, _aten.zeros_like, _aten.ones_like, _aten.full_like,
})
"""Ops without an ncnn layer (its ArgMax reduces the whole blob, not an axis; it has no TopK or
sort): where they feed only the tail, they run on the host with it. A candidate selection ahead of
the NMS (the k-th best score per level, and the scores below it zeroed) is made of them."""
_VIEWS = frozenset({
    _aten.unsqueeze, _aten.squeeze, _aten.view, _aten.reshape, _aten._unsafe_view, _aten.slice,
    _aten.select, _aten.flatten, _aten.expand, _aten.view_as, _aten.cat, operator.getitem,
})
"""Moved with those ops when between them and the NMS, never on their own (``getitem`` picks one
output of a multi-output op, topk's values; ``cat`` joins per-level selections)."""
_MOVABLE = _HOST_ONLY | _VIEWS

_SIZES = (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)

Source = tuple[str, int]
"""Where a value comes from: ("input", i) a graph input, ("head", k) or ("tail", k) an output."""


@dataclass(frozen=True)
class SplitParts:
    head: GraphModule
    tail: GraphModule
    head_inputs: list[int]
    tail_inputs: list[Source]
    outputs: list[Source]


def host_postprocess_split(gm: GraphModule, settings: Settings) -> PassResult:
    nms = [n for n in gm.graph.nodes if n.op == "call_function" and getattr(n.target, "_name", "") == _NMS]
    if not nms or hasattr(gm, TAIL):
        return PassResult(gm, False)
    tail = _descendants(nms)
    tail |= _host_only_inputs(tail)
    recompute = _to_recompute(tail, _input_free(gm))
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    output = next(n for n in gm.graph.nodes if n.op == "output")
    compute = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]
    head_nodes = _prune_unused([n for n in compute if n not in tail], recompute)
    tail_nodes = [n for n in compute if n in tail or n in recompute]
    finals = list(output.args[0])
    in_head = set(head_nodes)
    inside = tail | recompute
    tail_inputs = _unique(
        a for n in tail_nodes for a in n.all_input_nodes if a not in inside and a.op != "get_attr"
    )
    head_outputs = _unique(
        [a for a in tail_inputs if a.op != "placeholder"]
        + [f for f in finals if isinstance(f, Node) and f in in_head]
    )
    head_inputs = [p for p in placeholders if any(p in n.all_input_nodes for n in head_nodes)]
    tail_outputs = _unique(f for f in finals if isinstance(f, Node) and f in tail)
    setattr(gm, HEAD, _part(gm, head_nodes, head_inputs, head_outputs))
    setattr(gm, TAIL, _part(gm, tail_nodes, tail_inputs, tail_outputs))
    gm.graph = _wire(placeholders, head_inputs, head_outputs, tail_inputs, tail_outputs, finals)
    gm.delete_all_unused_submodules()
    return PassResult(gm, True)


def split_parts(gm: GraphModule) -> SplitParts | None:
    """Read back how ``host_postprocess_split`` wired the two halves; None when it did not fire."""
    if not hasattr(gm, TAIL):
        return None
    position = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
    calls = {n.target: n for n in gm.graph.nodes if n.op == "call_module"}
    sources: dict[Node, Source] = {n: ("input", i) for n, i in position.items()}
    for part in ("head", "tail"):
        for user in calls[HEAD if part == "head" else TAIL].users:
            sources[user] = (part, int(user.args[1]))
    output = next(n for n in gm.graph.nodes if n.op == "output")
    return SplitParts(
        head=getattr(gm, HEAD),
        tail=getattr(gm, TAIL),
        head_inputs=[position[a] for a in calls[HEAD].args],
        tail_inputs=[sources[a] for a in calls[TAIL].args],
        outputs=[sources[a] for a in output.args[0]],
    )


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


def _host_only_inputs(tail: set[Node]) -> set[Node]:
    """The ``_HOST_ONLY`` ops (and the views after them) computing the tail's inputs, for it alone."""
    pulled: set[Node] = set()
    stack = [a for n in tail for a in n.all_input_nodes]
    while stack:
        node = stack.pop()
        if node in tail or node in pulled or _packet(node) not in _MOVABLE:
            continue
        if all(u in tail or u in pulled for u in node.users):
            pulled.add(node)
            stack.extend(node.all_input_nodes)
    views = {n for n in pulled if _packet(n) in _VIEWS}
    while True:  # a view with no moved op behind it stays in the engine
        alone = {v for v in views if not any(a in pulled for a in v.all_input_nodes)}
        if not alone:
            return pulled
        pulled -= alone
        views -= alone


def _packet(node: Node) -> object:
    """The op a call node runs, overloads aside (``aten.topk`` for ``aten.topk.default``)."""
    if node.op != "call_function":
        return None
    return operator.getitem if node.target is operator.getitem else getattr(node.target, "overloadpacket", None)


def _to_recompute(tail: set[Node], input_free: set[Node]) -> set[Node]:
    """What the tail needs that the engine cannot hand over, recomputed on the host:

    - sizes (SymInts): engines return tensors only;
    - values computed without the inputs (anchors made from aranges over static feature sizes, a
      transform's 0-d resize ratios): they have no batch dim, while ncnn's engine outputs are per
      image.

    They are copied, not moved, since the head may need the same value (a reshape by batch).
    """
    recompute: set[Node] = set()
    stack = [a for n in tail for a in n.all_input_nodes]
    while stack:
        node = stack.pop()
        if node in tail or node in recompute or node.op in ("placeholder", "get_attr"):
            continue
        if not (isinstance(node.meta.get("val"), _SIZES) or node in input_free):
            continue  # a tensor computed from the inputs: the engine hands it over as an output
        recompute.add(node)
        stack.extend(node.all_input_nodes)
    return recompute


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


def _prune_unused(head_nodes: list[Node], recompute: set[Node]) -> list[Node]:
    """Drop the sizes that only the tail needed, so the engine gets no input it does not use."""
    kept = set(head_nodes)
    changed = True
    while changed:
        unused = {n for n in kept & recompute if not any(u in kept for u in n.users)}
        kept -= unused
        changed = bool(unused)
    return [n for n in head_nodes if n in kept]


def _part(gm: GraphModule, nodes: list[Node], inputs: list[Node], outputs: list[Node]) -> GraphModule:
    """A standalone GraphModule of ``nodes``; weights are copied in as attributes, not inputs."""
    graph = Graph()
    env: dict[Node, Node] = {}
    for node in inputs:
        env[node] = graph.placeholder(node.name)
        env[node].meta = dict(node.meta)
    for node in nodes:
        for attr in node.all_input_nodes:
            if attr.op == "get_attr" and attr not in env:
                env[attr] = graph.node_copy(attr)
        env[node] = graph.node_copy(node, lambda a: env[a])
    graph.output(tuple(env[n] for n in outputs))
    part = GraphModule(gm, graph)
    part.eval()
    return part


def _wire(
    placeholders: list[Node], head_inputs: list[Node], head_outputs: list[Node],
    tail_inputs: list[Node], tail_outputs: list[Node], finals: list[object],
) -> Graph:
    graph = Graph()
    env: dict[Node, Node] = {}
    for node in placeholders:
        env[node] = graph.placeholder(node.name)
        env[node].meta = dict(node.meta)
    head = graph.call_module(HEAD, tuple(env[n] for n in head_inputs))
    for k, node in enumerate(head_outputs):
        env[node] = graph.call_function(operator.getitem, (head, k))
        env[node].meta = dict(node.meta)
    tail = graph.call_module(TAIL, tuple(env[n] for n in tail_inputs))
    for k, node in enumerate(tail_outputs):
        env[node] = graph.call_function(operator.getitem, (tail, k))
        env[node].meta = dict(node.meta)
    for node in finals:
        if isinstance(node, Node) and node not in env:  # a weight returned as is
            env[node] = graph.node_copy(node)
    graph.output(tuple(env[f] if isinstance(f, Node) else f for f in finals))
    return graph


def _unique(nodes: Iterable[Node]) -> list[Node]:
    return list(dict.fromkeys(nodes))
