"""The NMS ops' names as graphs hold them: the one spelling every pass, cut and lowering matches.

An FX node's target prints as ``fxdeploy.multiclass_nms.default``; ``is_nms`` matches by that name,
so a matcher never imports the op (or torchvision's) to compare against it.
"""

from __future__ import annotations

from typing import Any

import torch

MULTICLASS_NMS = "fxdeploy.multiclass_nms.default"
"""The canonical op (docs/nms-spec.md): every NMS becomes one before lowering."""
NMS = "fxdeploy.nms.default"
BATCHED_NMS = "fxdeploy.batched_nms.default"
"""torchvision.ops.nms and batched_nms, as their substitutions trace them."""
FXDEPLOY_NMS = (MULTICLASS_NMS, NMS, BATCHED_NMS)
TORCHVISION_NMS = "torchvision.nms.default"


def is_nms(node: Any, names: tuple[str, ...] = FXDEPLOY_NMS) -> bool:
    """``node`` calls one of ``names`` (by default any of fxdeploy's NMS ops)."""
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and str(node.target) in names
