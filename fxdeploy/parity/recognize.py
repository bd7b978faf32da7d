"""Recognise detection outputs from their structure, and cut them into per-image detections.

Two layouts are detections:
- the ``multiclass_nms`` contract (docs/nms-spec.md): boxes [B, K, 4], scores [B, K], labels [B, K]
  integer, num_dets [B] integer, as a tuple/list in that order (an optional fifth [B, K] index
  is ignored) or a dict whose keys end in boxes/scores/labels/num_dets; rows past num_dets
  are padding and dropped here;
- torchvision's list of per-image dicts holding "boxes" [n, 4], "scores" [n], "labels" [n].
Other entries with one row per detection (keypoints, masks) are per-detection fields, compared
on the paired detections.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from fxdeploy.parity.boxes import Detections
from fxdeploy.parity.tensors import as_tensor

_NUM_SUFFIXES = ("num_dets", "num_detections")


def as_detections(value: Any) -> tuple[list[Detections], set[str]] | None:
    """(per-image detections, dict keys they used) when ``value`` is a detection layout."""
    if isinstance(value, Mapping):
        keys = _contract_keys(value)
        if keys is None:
            return None
        boxes, scores, labels, num = (as_tensor(value[k]) for k in keys)
        used = set(keys) | {k for k in value if isinstance(k, str) and k.endswith("index")}
        dets = _padded(boxes, scores, labels, num)
        if dets is None:
            return None
        rows = {k: t for k in value if k not in used and (t := as_tensor(value[k])) is not None
                and t.shape[:2] == boxes.shape[:2]}  # per-detection fields, [B, K, ...]
        dets = [Detections(d.boxes, d.scores, d.labels, {k: t[b, :len(d)] for k, t in rows.items()})
                for b, d in enumerate(dets)]
        return dets, used | set(rows)
    if isinstance(value, Sequence) and not isinstance(value, str) and value:
        if all(isinstance(item, Mapping) for item in value):
            dets = [_per_image_dict(item) for item in value]
            return None if any(d is None for d in dets) else (dets, set())  # type: ignore[misc]
        if len(value) in (4, 5):
            tensors = [as_tensor(v) for v in value]
            if any(t is None for t in tensors):
                return None
            if len(tensors) == 5 and not _is_int(tensors[4], 2):
                return None
            dets = _padded(*tensors[:4])
            return (dets, set()) if dets is not None else None
    return None


def _contract_keys(value: Mapping[Any, Any]) -> tuple[Any, Any, Any, Any] | None:
    found: dict[str, Any] = {}
    for key in value:
        if not isinstance(key, str):
            continue
        for role, suffixes in (("boxes", ("boxes",)), ("scores", ("scores",)), ("labels", ("labels",)),
                               ("num", _NUM_SUFFIXES)):
            if key.endswith(suffixes):
                if role in found:
                    return None  # two candidates for one role: ambiguous, not treated as detections
                found[role] = key
    if len(found) != 4:
        return None
    return found["boxes"], found["scores"], found["labels"], found["num"]


def _padded(boxes: Any, scores: Any, labels: Any, num: Any) -> list[Detections] | None:
    if any(t is None for t in (boxes, scores, labels, num)):
        return None
    if not (boxes.dim() == 3 and boxes.shape[-1] == 4 and boxes.is_floating_point()):
        return None
    batch, k = boxes.shape[0], boxes.shape[1]
    if not (scores.is_floating_point() and tuple(scores.shape) == (batch, k)):
        return None
    if not (_is_int(labels, 2) and tuple(labels.shape) == (batch, k)):
        return None
    if not (_is_int(num, 1) and tuple(num.shape) == (batch,)):
        return None
    dets = []
    for b in range(batch):
        n = max(0, min(int(num[b]), k))
        dets.append(Detections(boxes[b, :n], scores[b, :n], labels[b, :n].long()))
    return dets


def _per_image_dict(item: Mapping[Any, Any]) -> Detections | None:
    if not all(k in item for k in ("boxes", "scores", "labels")):
        return None
    boxes, scores, labels = (as_tensor(item[k]) for k in ("boxes", "scores", "labels"))
    if boxes is None or scores is None or labels is None:
        return None
    if not (boxes.dim() == 2 and boxes.shape[-1] == 4 and scores.dim() == 1 and labels.dim() == 1):
        return None
    if not (boxes.shape[0] == scores.shape[0] == labels.shape[0]):
        return None
    fields = {k: as_tensor(v) for k, v in item.items() if k not in ("boxes", "scores", "labels")}
    if any(t is None or t.dim() == 0 or t.shape[0] != boxes.shape[0] for t in fields.values()):
        return None  # not one row per detection: compared as plain outputs
    return Detections(boxes, scores, labels.long(), fields)  # type: ignore[arg-type]


def _is_int(tensor: torch.Tensor, rank: int) -> bool:
    return tensor.dim() == rank and not tensor.is_floating_point() and tensor.dtype != torch.bool
