"""Argument checks of the public NMS wrappers.

They run in Python on static values (ranks, sizes, Python numbers), so they also run, and cost
nothing, while torch.export traces a model. Every message names the operator, the argument, what
was expected and what was given.
"""

from __future__ import annotations

import math

import torch


def _shape(t: torch.Tensor) -> tuple[object, ...]:
    return tuple(t.shape)


def check_tensor(op: str, name: str, value: object, *, floating: bool = True) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor; got {type(value).__name__}")
    if floating and not value.dtype.is_floating_point:
        raise TypeError(f"{op}: {name} must be a floating-point tensor; got dtype {value.dtype}")
    return value


def check_int(op: str, name: str, value: object, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{op}: {name} must be an int; got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{op}: {name} must be >= {minimum}; got {value}")
    return value


def check_float(op: str, name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{op}: {name} must be a float; got {type(value).__name__} {value!r}")
    if math.isnan(value):
        raise ValueError(f"{op}: {name} must not be NaN")
    return float(value)


def check_bool(op: str, name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{op}: {name} must be a bool; got {type(value).__name__} {value!r}")
    return value


def check_iou_threshold(op: str, value: object) -> float:
    threshold = check_float(op, "iou_threshold", value)
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"{op}: iou_threshold must be in [0, 1]; got {threshold}")
    return threshold


def check_multiclass_shapes(boxes: torch.Tensor, scores: torch.Tensor) -> None:
    op = "multiclass_nms"
    if scores.dim() != 3:
        raise ValueError(f"{op}: scores must have shape [B, N, C]; got {_shape(scores)}")
    if boxes.dim() == 3:
        expected = "[B, N, 4]"
        ok = boxes.shape[2] == 4 and boxes.shape[:2] == scores.shape[:2]
    elif boxes.dim() == 4:
        expected = "[B, N, C, 4]"
        ok = boxes.shape[3] == 4 and boxes.shape[:3] == scores.shape
    else:
        raise ValueError(f"{op}: boxes must have shape [B, N, 4] or [B, N, C, 4]; got {_shape(boxes)}")
    if not ok:
        raise ValueError(
            f"{op}: scores must have shape [B, N, C] matching boxes {expected}; "
            f"got boxes {_shape(boxes)} and scores {_shape(scores)}"
        )
    if scores.shape[2] == 0:
        raise ValueError(f"{op}: scores must have at least one class (C >= 1); got {_shape(scores)}")
    if boxes.device != scores.device:
        raise ValueError(f"{op}: boxes and scores must be on one device; got {boxes.device} and {scores.device}")


def check_background(background_label_id: object, num_classes: int) -> int:
    op = "multiclass_nms"
    label = check_int(op, "background_label_id", background_label_id, minimum=-1)
    if label >= num_classes:
        raise ValueError(f"{op}: background_label_id must be -1 (none) or in [0, {num_classes}); got {label}")
    return label


def check_pre_top_k(value: object) -> int:
    op = "multiclass_nms"
    pre_top_k = check_int(op, "pre_top_k", value, minimum=-1)
    if pre_top_k == 0:
        raise ValueError(f"{op}: pre_top_k must be -1 (off) or > 0; got 0")
    return pre_top_k


def check_torchvision_shapes(
    op: str, boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor | None = None
) -> None:
    """torchvision's own checks: boxes [N, 4], scores [N] (and idxs [N]) on one device."""
    if boxes.dim() != 2 or boxes.shape[1] != 4:
        raise ValueError(f"{op}: boxes must have shape [N, 4]; got {_shape(boxes)}")
    if scores.dim() != 1 or scores.shape[0] != boxes.shape[0]:
        raise ValueError(
            f"{op}: scores must have shape [N] matching boxes [N, 4]; "
            f"got boxes {_shape(boxes)} and scores {_shape(scores)}"
        )
    if idxs is not None and (idxs.dim() != 1 or idxs.shape[0] != boxes.shape[0]):
        raise ValueError(
            f"{op}: idxs must have shape [N] matching boxes [N, 4]; got boxes {_shape(boxes)} and idxs {_shape(idxs)}"
        )
    if idxs is not None and (idxs.dtype.is_floating_point or idxs.dtype.is_complex):
        raise TypeError(f"{op}: idxs must be an integer tensor; got dtype {idxs.dtype}")
