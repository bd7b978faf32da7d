"""vmap's views, taken out of a vectorized graph where they change nothing.

A vectorized graph runs each op of the per-image graph on the physical batch ``[B, 1, C, H, W]``.
The rules that fold the batch into dim 0 (convolution, batch norm, pooling) view their input as
``[B, C, H, W]`` and their output back as ``[B, 1, ...]``, and the pointwise ops between them run on
the 5-D view. So two convolutions in a row are ``conv, unsqueeze, view, batch_norm, unsqueeze,
silu, view, conv``. torch does not mind; runtimes fuse by adjacency: ONNX Runtime then folds no
batch norm into its convolution and leaves its blocked conv layout around every Reshape (YOLO11n's
batched artifact spent a third more CPU time than eight per-image calls).

Two rewrites, repeated until neither applies:
- **sink**: a pointwise op whose tensor operands are each a view from one shape to one other shape
  (0-d operands aside) runs on the viewed tensors, and the view moves after it. A view from a shape
  to a shape is one fixed map of elements (row-major order is kept), and a pointwise op works
  element by element with no broadcasting between operands of one shape, so the order of the two
  does not matter;
- **collapse**: a chain of views whose result has the shape of a tensor earlier in the chain is
  that tensor (same elements, same row-major order, same shape);
- **cat and split** along another dim than the one an ``unsqueeze`` added commute with it:
  ``cat([unsqueeze(a, k), unsqueeze(b, k)], d)`` is ``unsqueeze(cat([a, b], d'), k)`` and each piece of
  ``split(unsqueeze(a, k), n, d)`` is ``unsqueeze`` of that piece of ``split(a, n, d')``, ``d'`` being
  ``d`` counted without dim ``k``.

A node the graph returns keeps its name (the exported program's signature names it).
"""

from __future__ import annotations

import operator

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from fxdeploy.passes.graph_utils import fill_meta

aten = torch.ops.aten
VIEWS = frozenset({
    aten.view.default, aten._unsafe_view.default, aten.unsqueeze.default,
    aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims,
})
"""Ops whose result is their input's elements in row-major order, in another shape, and never a
copy: so a chain of them back to a shape has its start's strides too (``reshape`` and ``flatten``,
which copy a tensor they cannot view, are not among them)."""


def simplify(gm: torch.fx.GraphModule) -> int:
    """Sink pointwise ops under views and collapse view chains in ``gm``, in place; returns how
    many rewrites were made."""
    graph, made = gm.graph, 0
    progress = True
    while progress:
        progress = False
        for node in list(graph.nodes):
            if not node._erased and (_sink(graph, node) or _collapse(graph, node) or _cat(graph, node)
                                     or _split(graph, node)):
                progress, made = True, made + 1
    if made:
        for node in reversed(list(graph.nodes)):
            if node.op == "call_function" and node.target in VIEWS and not node.users:
                graph.erase_node(node)
        gm.recompile()
    return made


def _sink(graph: torch.fx.Graph, node: torch.fx.Node) -> bool:
    """``op(view(a), view(b))`` as ``view(op(a, b))`` where :func:`sink_check` allows it."""
    views = sink_check(node)
    if views is None:
        return False
    first = views[0]
    unviewed = {view: view.args[0] for view in views}
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda a: unviewed.get(a, a))
    with graph.inserting_before(node):
        op = graph.call_function(node.target, args, kwargs)
        view = graph.call_function(first.target, (op, *first.args[1:]), dict(first.kwargs))
    _replace(graph, node, [op, view])
    return True


def sink_check(node: torch.fx.Node) -> list[torch.fx.Node] | None:
    """The view operands of ``node`` where it can run before them, else None. It can where it is
    a functional pointwise op, not returned by the graph, whose tensor operands are all views from
    one shape to one shape, or 0-d (the same value for every element)."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return None
    if torch.Tag.pointwise not in node.target.tags or node.target._schema.is_mutable:
        return None
    if _returned(node):
        return None
    views = [a for a in node.all_input_nodes if _is_view(a)]
    others = [a for a in node.all_input_nodes if a not in views]
    if not views or any(_value(a) is None or _value(a).dim() != 0 for a in others):
        return None
    sources = [_value(v.args[0]) for v in views]
    results = [_value(v) for v in views]
    if any(x is None for x in sources + results):
        return None
    pairs = zip(sources, results, strict=True)
    if not all(_same_shape(sources[0], x) and _same_shape(results[0], y) for x, y in pairs):
        return None
    return views


def _collapse(graph: torch.fx.Graph, node: torch.fx.Node) -> bool:
    """A view, not returned by the graph, of a tensor of its own shape (through views) is that tensor."""
    if not _is_view(node) or _returned(node):
        return False
    result = _value(node)
    source = node.args[0]
    while isinstance(source, torch.fx.Node):
        value = _value(source)
        if value is not None and value.dtype == result.dtype and _same_shape(value, result):
            node.replace_all_uses_with(source)
            graph.erase_node(node)
            return True
        if not _is_view(source):
            return False
        source = source.args[0]
    return False


def _cat(graph: torch.fx.Graph, node: torch.fx.Node) -> bool:
    """``cat([unsqueeze(a, k), unsqueeze(b, k)], d)`` as ``unsqueeze(cat([a, b], d'), k)`` (d != k)."""
    if node.op != "call_function" or node.target is not aten.cat.default or _returned(node):
        return False
    parts, dim = node.args[0], node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    k = _unsqueezed_dim(parts)
    if k is None or _value(node) is None:
        return False
    dim = dim % _value(node).dim()
    if dim == k:
        return False
    with graph.inserting_before(node):
        cat = graph.call_function(aten.cat.default, ([p.args[0] for p in parts], dim - (dim > k)))
        unsqueeze = graph.call_function(aten.unsqueeze.default, (cat, k))
    _replace(graph, node, [cat, unsqueeze])
    return True


SPLITS = frozenset({aten.split.Tensor, aten.split_with_sizes.default})


def _split(graph: torch.fx.Graph, node: torch.fx.Node) -> bool:
    """Each piece of ``split(unsqueeze(a, k), n, d)`` as ``unsqueeze`` of that piece of ``split(a, n, d')``."""
    if node.op != "call_function" or node.target not in SPLITS:
        return False
    pieces = list(node.users)
    if not pieces or any(p.target is not operator.getitem or _returned(p) for p in pieces):
        return False
    k = _unsqueezed_dim([node.args[0]])
    if k is None:
        return False
    rank = _value(node.args[0]).dim()
    dim = (node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)) % rank
    if dim == k:
        return False
    with graph.inserting_before(node):
        split = graph.call_function(node.target, (node.args[0].args[0], node.args[1], dim - (dim > k)))
    new = [split]
    for piece in pieces:
        with graph.inserting_before(piece):
            part = graph.call_function(operator.getitem, (split, piece.args[1]))
            unsqueeze = graph.call_function(aten.unsqueeze.default, (part, k))
        new += [part, unsqueeze]
    _inherit(node, new)
    for piece, unsqueeze in zip(pieces, new[2::2], strict=True):
        piece.replace_all_uses_with(unsqueeze)
        graph.erase_node(piece)
    graph.erase_node(node)
    return True


def _unsqueezed_dim(parts: object) -> int | None:
    """The dim every one of ``parts`` gained from an ``unsqueeze``, where they all did at one dim."""
    if not isinstance(parts, (list, tuple)) or not parts:
        return None
    dims = set()
    for part in parts:
        if not (_is_view(part) and part.target is aten.unsqueeze.default):
            return None
        dims.add(part.args[1] % _value(part).dim())
    return dims.pop() if len(dims) == 1 else None


def _replace(graph: torch.fx.Graph, node: torch.fx.Node, new: list[torch.fx.Node]) -> None:
    """``node``'s uses go to the last of ``new`` (inserted before it, in order), and ``node`` goes."""
    _inherit(node, new)
    node.replace_all_uses_with(new[-1])
    graph.erase_node(node)


def _inherit(node: torch.fx.Node, new: list[torch.fx.Node]) -> None:
    """``new`` nodes, made for ``node``, take its metadata (its call site) and their own values."""
    for n in new:
        n.meta.update({k: v for k, v in node.meta.items() if k != "val"})
    fill_meta(new)


def _returned(node: torch.fx.Node) -> bool:
    return any(user.op == "output" for user in node.users)


def _is_view(node: object) -> bool:
    return (isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in VIEWS
            and isinstance(node.args[0], torch.fx.Node) and _value(node) is not None)


def _value(node: torch.fx.Node) -> torch.Tensor | None:
    value = node.meta.get("val")
    return value if isinstance(value, torch.Tensor) else None


def _same_shape(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shapes for every value of the symbolic sizes, asking for no guard."""
    return a.dim() == b.dim() and all(statically_known_true(x == y) for x, y in zip(a.shape, b.shape, strict=True))
