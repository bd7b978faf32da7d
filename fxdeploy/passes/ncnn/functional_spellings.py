"""Spell the internal ops that functionalization writes as the public ops they stand for.

A graph that writes is functionalized before the passes (``capture/functional.py``), which also
re-traces its composite ops: ``x.reshape(s)`` becomes ``_unsafe_view(clone(x), s)`` and
``F.normalize``'s ``clamp(min=eps)`` a ``clamp_min``. pnnx has no converter for ``_unsafe_view``,
``clamp_min`` or ``clamp_max``, and leaves them as ``aten::`` layers ncnn cannot create (SSD and
RetinaNet, whose transform copies images into a batch, hit both). Each has an exact public form:

    _unsafe_view(x, s)   reshape(x, s)          the same elements in the same order
    clamp_min(x, m)      clamp(x, m, None)
    clamp_max(x, m)      clamp(x, None, m)
    numpy_T(x)           permute(x, [n-1, ..., 0])   ``x.T``, which torch.export keeps and pnnx does not know

CLIP's embeddings are divided by ``torch.linalg.norm(x, dim=-1, keepdim=True)``: an ``aten.linalg_norm``
pnnx leaves, where the vector norm it stands for is ``linalg_vector_norm`` (pnnx's ``torch.norm``, an
ncnn Reduction). It is that norm, by its definition, where ``ord`` is None (the 2-norm of the dims
given, flattened) or 2 over one dim; ``ord=2`` over two dims is a matrix's spectral norm and stays.
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.settings import Settings

aten = torch.ops.aten
_SPELLINGS = {
    aten._unsafe_view.default: (aten.reshape.default, lambda args: args),
    aten.clamp_min.default: (aten.clamp.default, lambda args: (args[0], args[1], None)),
    aten.clamp_max.default: (aten.clamp.default, lambda args: (args[0], None, args[1])),
    aten.clamp_min.Tensor: (aten.clamp.Tensor, lambda args: (args[0], args[1], None)),
    aten.clamp_max.Tensor: (aten.clamp.Tensor, lambda args: (args[0], None, args[1])),
    aten.numpy_T.default: (aten.permute.default, lambda args: (args[0], list(range(args[0].meta["val"].dim()))[::-1])),
}
"""Internal op -> (public op, its arguments from the internal op's)."""
_NORM = aten.linalg_norm.default
_NORM_DEFAULTS = (None, None, False)  # ord, dim, keepdim


def _vector_norm(args: tuple[object, ...]) -> tuple[object, ...] | None:
    """``linalg_norm``'s arguments as ``linalg_vector_norm``'s where they name a vector 2-norm; else None."""
    source, (order, dim, keepdim) = args[0], (*args[1:], *_NORM_DEFAULTS[len(args) - 1:])
    value = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    one_dim = isinstance(dim, int) or (isinstance(dim, (list, tuple)) and len(dim) == 1) or (
        dim is None and isinstance(value, torch.Tensor) and value.dim() == 1)
    if order is None or (order == 2 and one_dim):  # noqa: PLR2004 - the 2-norm
        return (source, 2, dim, keepdim)
    return None


def functional_spellings(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _SPELLINGS and not node.kwargs:
            target, arguments = _SPELLINGS[node.target]
            node.target, node.args = target, arguments(node.args)  # meta['val'] stays: same values
            modified = True
        elif node.op == "call_function" and node.target is _NORM and not node.kwargs:
            vector = _vector_norm(node.args)
            if vector is not None:
                node.target, node.args = aten.linalg_vector_norm.default, vector
                modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph
