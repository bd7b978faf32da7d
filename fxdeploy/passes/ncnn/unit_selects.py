"""Spell a select or unbind along a dim of static size 1 as a squeeze.

``x[0]`` and ``x.unbind(0)`` on a tensor with one row are that row: the same values without the
axis. pnnx has no ncnn layer for ``Tensor.select`` or ``torch.unbind`` along the batch axis, and
torchvision makes them at batch 1 (its detectors take a list of images, unbound from the batch;
``GeneralizedRCNNTransform`` resizes with ``interpolate(image[None])[0]``). A squeeze of a size-1
axis is a Reshape, which ncnn has.
"""

from __future__ import annotations

import operator

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.settings import Settings

aten = torch.ops.aten


def unit_selects(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        dim = _unit_dim(node)
        if dim is None:
            continue
        if node.target is aten.select.int:
            _replace(gm, node, node, dim)
        else:  # unbind: its one item, read through getitem
            for user in list(node.users):
                _replace(gm, user, node, dim)
            if not node.users:
                gm.graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def _unit_dim(node: torch.fx.Node) -> int | None:
    """The dim of a select/unbind of a static size-1 dim (index 0 or -1), else None."""
    if node.op != "call_function" or node.target not in (aten.select.int, aten.unbind.int):
        return None
    source = node.args[0]
    value = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor) or value.dim() == 0:
        return None
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    if not isinstance(dim, int) or not _is_one(value.shape[dim % value.dim()]):
        return None
    if node.target is aten.select.int and node.args[2] not in (0, -1):
        return None
    if node.target is aten.unbind.int and not all(
        u.op == "call_function" and u.target is operator.getitem for u in node.users
    ):
        return None
    return dim % value.dim()


def _replace(gm: torch.fx.GraphModule, old: torch.fx.Node, source_op: torch.fx.Node, dim: int) -> None:
    source = source_op.args[0]
    with gm.graph.inserting_before(old):
        squeezed = gm.graph.call_function(aten.squeeze.dim, (source, dim))
    squeezed.meta.update(old.meta)
    old.replace_all_uses_with(squeezed)
    gm.graph.erase_node(old)


def _is_one(size: object) -> bool:
    """A static 1; a dynamic size is never assumed to be one (comparing it would add a guard)."""
    return isinstance(size, int) and size == 1
