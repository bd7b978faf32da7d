"""The substitutions fxdeploy always applies: the ecosystem's NMS functions.

torchvision is optional. Where it is installed (and imports), ``torchvision.ops.nms`` and
``batched_nms`` are traced as fxdeploy's ops; the ``torchvision::nms`` op node that other code
calls directly is rewritten by the ``substitute_nms`` pass instead. Where torchvision is missing,
or is a build that does not import against this torch, there is nothing to substitute.
"""

from __future__ import annotations

import functools
import importlib.util
import logging

import torch

from fxdeploy.substitution import Substitution

logger = logging.getLogger(__name__)


def _nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    from fxdeploy import ops

    return ops.nms(boxes, scores, iou_threshold)


def _batched_nms(
    boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor, iou_threshold: float
) -> torch.Tensor:
    from fxdeploy import ops

    return ops.batched_nms(boxes, scores, idxs, iou_threshold)


@functools.cache
def torchvision_ops() -> object | None:
    if importlib.util.find_spec("torchvision") is None:
        return None
    try:
        import torchvision.ops
    except Exception as exc:  # a CUDA-only wheel raises at import against CPU torch
        logger.info("torchvision is installed but does not import (%s); no NMS to substitute", exc)
        return None
    return torchvision.ops


def builtin_substitutions() -> list[Substitution]:
    tv_ops = torchvision_ops()
    if tv_ops is None:
        return []
    return [
        Substitution(tv_ops.nms, _nms),  # type: ignore[attr-defined]
        Substitution(tv_ops.batched_nms, _batched_nms),  # type: ignore[attr-defined]
    ]
