"""The substitutions fxdeploy always applies: the ecosystem's NMS functions.

torchvision is optional. Where it is installed (and imports), ``torchvision.ops.batched_nms`` is
traced as fxdeploy's op; ``torchvision.ops.nms`` is traced as the ``torchvision::nms`` op node,
which the ``substitute_nms`` pass rewrites. Where torchvision is missing,
or is a build that does not import against this torch, there is nothing to substitute.
"""

from __future__ import annotations

import functools
import importlib.util
import logging

import torch

from fxdeploy.substitution import Substitution

logger = logging.getLogger(__name__)


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
    # torchvision.ops.nms is not substituted: it calls the torchvision::nms op, whose node the
    # substitute_nms pass rewrites, so the fast non-strict capture takes it as it is (a function
    # substitution needs dynamo, which cannot trace Ultralytics' time.time() around its NMS).
    # batched_nms is substituted: on large inputs it loops over the classes in Python.
    return [Substitution(tv_ops.batched_nms, _batched_nms)]  # type: ignore[attr-defined]
