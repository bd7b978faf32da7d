"""One image's detections as the matcher sees them, and the IoU it pairs boxes by."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

CORNER_RTOL = 5e-5
"""Boxes whose corners agree to this fraction of their largest coordinate are the same box, whatever
their IoU: IoU has no value on zero-area boxes (clipping makes them, a box past the image edge
becoming x1 = x2 = W), and on a box 0.1 px thin a 0.001 px float difference costs 1% of IoU. A
ResNet-50's float noise moves a decoded box by about 2e-5 of its coordinates (FCOS)."""


@dataclass(frozen=True)
class Detections:
    """One image's detections: boxes [n, 4] (x1, y1, x2, y2), scores [n], labels [n], and any other
    per-detection fields (keypoints [n, 17, 3], masks...). A role that is None does not take part
    in pairing: lower()'s check sees bare output leaves, and not every leaf group has all three."""

    boxes: torch.Tensor | None = None
    scores: torch.Tensor | None = None
    labels: torch.Tensor | None = None
    fields: dict[str, torch.Tensor] = field(default_factory=dict)

    def __len__(self) -> int:
        present = [t for t in (self.scores, self.labels, self.boxes, *self.fields.values()) if t is not None]
        return int(present[0].shape[0]) if present else 0


def box_iou(a: torch.Tensor, b: torch.Tensor, corner_rtol: float = CORNER_RTOL) -> torch.Tensor:
    """IoU matrix [len(a), len(b)] on normalized corners (either corner order allowed); 1 where the
    corners agree to ``corner_rtol`` (0: only identical boxes), degenerate boxes included."""
    a, b = normalize(a.double()), normalize(b.double())
    top_left = torch.maximum(a[:, None, :2], b[None, :, :2])
    bottom_right = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = (bottom_right - top_left).clamp_min(0).prod(-1)
    area_a = (a[:, 2:] - a[:, :2]).prod(-1)
    area_b = (b[:, 2:] - b[:, :2]).prod(-1)
    union = area_a[:, None] + area_b[None, :] - inter
    iou = torch.where(union > 0, inter / union.clamp_min(1e-300), torch.zeros_like(union))
    scale = torch.maximum(a.abs().amax(-1)[:, None], b.abs().amax(-1)[None, :]).clamp_min(1.0)
    same = (a[:, None, :] - b[None, :, :]).abs().amax(-1) <= corner_rtol * scale
    iou = torch.where(same, torch.ones_like(iou), iou)
    return torch.maximum(iou, _flat_iou(a, b, corner_rtol * scale))


def _flat_iou(a: torch.Tensor, b: torch.Tensor, tol: torch.Tensor) -> torch.Tensor:
    """Of two boxes with no height (or no width) at the same y (x), within ``tol``: the IoU of
    their spans along the other axis. Area IoU is 0 there for any float difference (FCOS decodes
    a box whose top and bottom meet), though the two are the same segment to the eye."""
    out = torch.zeros(len(a), len(b), dtype=a.dtype)
    for flat, along in ((1, 0), (0, 1)):  # (the axis with no extent, the axis compared)
        thin_a = (a[:, flat + 2] - a[:, flat]) <= 0
        thin_b = (b[:, flat + 2] - b[:, flat]) <= 0
        level = (a[:, None, flat] - b[None, :, flat]).abs() <= tol
        low = torch.maximum(a[:, None, along], b[None, :, along])
        high = torch.minimum(a[:, None, along + 2], b[None, :, along + 2])
        inter = (high - low).clamp_min(0)
        union = (a[:, along + 2] - a[:, along])[:, None] + (b[:, along + 2] - b[:, along])[None, :] - inter
        spans = torch.where(union > 0, inter / union.clamp_min(1e-300), torch.zeros_like(union))
        out = torch.maximum(out, torch.where(thin_a[:, None] & thin_b[None, :] & level, spans, torch.zeros_like(spans)))
    return out


def normalize(boxes: torch.Tensor) -> torch.Tensor:
    x1, x2 = torch.minimum(boxes[:, 0], boxes[:, 2]), torch.maximum(boxes[:, 0], boxes[:, 2])
    y1, y2 = torch.minimum(boxes[:, 1], boxes[:, 3]), torch.maximum(boxes[:, 1], boxes[:, 3])
    return torch.stack([x1, y1, x2, y2], -1)
