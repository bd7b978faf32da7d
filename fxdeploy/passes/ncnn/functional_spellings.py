"""Spell the internal ops that functionalization writes as the public ops they stand for.

A graph that writes is functionalized before the passes (``capture/functional.py``), which also
re-traces its composite ops: ``x.reshape(s)`` becomes ``_unsafe_view(clone(x), s)`` and
``F.normalize``'s ``clamp(min=eps)`` a ``clamp_min``. pnnx has no converter for ``_unsafe_view``,
``clamp_min`` or ``clamp_max``, and leaves them as ``aten::`` layers ncnn cannot create (SSD and
RetinaNet, whose transform copies images into a batch, hit both). Each has an exact public form:

    _unsafe_view(x, s)   reshape(x, s)          the same elements in the same order
    clamp_min(x, m)      clamp(x, m, None)
    clamp_max(x, m)      clamp(x, None, m)
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
}
"""Internal op -> (public op, its arguments from the internal op's)."""


def functional_spellings(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _SPELLINGS and not node.kwargs:
            target, arguments = _SPELLINGS[node.target]
            node.target, node.args = target, arguments(node.args)  # meta['val'] stays: same values
            modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph
