"""A chunk whose pieces differ in size, spelt as the split it is.

``torch.chunk(x, 3, dim=2)`` of 64 rows gives 22, 22 and 20 rows (each ``ceil(64 / 3)``, the last
what is left). pnnx writes ncnn's Slice with every piece "the rest, shared equally" (``-233``),
which ncnn cuts as 21, 21 and 22: the engine's outputs had other sizes than PyTorch's even at the
example, and lower() refused it. ``split_with_sizes`` with the sizes PyTorch's chunk gives (its
outputs' own sizes, static) is the same cut, row for row, which pnnx writes with the sizes:

    chunk(x, n, d) == split_with_sizes(x, [sizes of chunk's outputs along d], d)

Fires on ``aten.chunk`` whose pieces have static sizes that are not all equal; an even chunk (which
ncnn cuts as PyTorch does) and one of run-time sizes stay.
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import replaced_by
from fxdeploy.settings import Settings

aten = torch.ops.aten


def uneven_chunks(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    graph = gm.graph
    for node in list(graph.nodes):
        if check(node) is not None:
            continue
        dim = _dim(node)
        with graph.inserting_before(node):
            split = graph.call_function(aten.split_with_sizes.default, (node.args[0], _sizes(node), dim))
        replaced_by([split], node)
        node.replace_all_uses_with(split)
        graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def check(node: torch.fx.Node) -> str | None:
    """None when ``node`` is a chunk into pieces of static sizes, not all equal; else why not."""
    if node.op != "call_function" or node.target is not aten.chunk.default:
        return "not a chunk"
    pieces = node.meta.get("val")
    if not isinstance(pieces, (list, tuple)) or not all(isinstance(p, torch.Tensor) for p in pieces):
        return "its pieces are unknown"
    sizes = _sizes(node)
    if not all(isinstance(s, int) for s in sizes):
        return "its pieces' sizes are run-time sizes"
    if len(set(sizes)) <= 1:
        return "its pieces are of one size, which ncnn cuts as PyTorch does"
    return None


def _dim(node: torch.fx.Node) -> int:
    dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)  # noqa: PLR2004
    return dim % node.args[0].meta["val"].dim()


def _sizes(node: torch.fx.Node) -> list[object]:
    """The sizes of the chunk's pieces along its dim (ints, or SymInts where run-time)."""
    dim = _dim(node)
    return [piece.shape[dim] for piece in node.meta["val"]]
