"""Detection-aware comparison (NMS_SPEC.md, "Comparing outputs across targets").

Runtimes may order equal scores differently, so two correct NMS results can differ element by
element. Here detections are paired per image and label: each reference detection, by
descending score, takes the free detection of the same label with IoU >= ``iou`` (the same box)
whose score is closest; then the paired scores are compared. Whatever stays unpaired on either
side is reported. Padding rows past ``num_dets`` are never looked at.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Detections:
    """One image's detections: boxes [n, 4] (x1, y1, x2, y2), scores [n], labels [n], and any
    other per-detection fields (keypoints [n, 17, 3], masks...), compared on paired detections."""

    boxes: torch.Tensor
    scores: torch.Tensor
    labels: torch.Tensor
    fields: dict[str, torch.Tensor] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.scores.shape[0])


@dataclass(frozen=True)
class ImageMatch:
    image: int
    matched: int
    unmatched_ref: int
    unmatched_got: int
    worst_iou: float
    max_score_diff: float
    problems: tuple[str, ...] = ()
    field_mismatches: int = 0


@dataclass(frozen=True)
class DetectionComparison:
    name: str
    images: list[ImageMatch] = field(default_factory=list)
    iou: float = 0.99
    score_atol: float = 1e-4
    problem: str = ""

    @property
    def kind(self) -> str:
        return "detections"

    @property
    def ok(self) -> bool:
        return not self.problem and all(
            m.unmatched_ref == 0 and m.unmatched_got == 0 and m.max_score_diff <= self.score_atol
            and not m.field_mismatches for m in self.images
        )

    @property
    def max_abs(self) -> float:
        """The largest score difference over matched pairs: the number to put in a max-error column."""
        return max((m.max_score_diff for m in self.images), default=0.0) if not self.problem else float("inf")

    @property
    def worst_iou(self) -> float:
        return min((m.worst_iou for m in self.images), default=1.0)

    @property
    def detail(self) -> str:
        if self.problem:
            return self.problem
        matched = sum(m.matched for m in self.images)
        missing = sum(m.unmatched_ref for m in self.images)
        extra = sum(m.unmatched_got for m in self.images)
        text = (f"{matched} matched, {missing} missing, {extra} extra over {len(self.images)} image(s); "
                f"worst IoU {self.worst_iou:.4f}, max score diff {self.max_abs:.3g}")
        problems = [p for m in self.images for p in m.problems]
        return text + ("; " + "; ".join(problems[:5]) if problems else "")


CORNER_RTOL = 5e-5
"""Boxes whose corners agree to this fraction of their largest coordinate are the same box, whatever
their IoU: IoU has no value on zero-area boxes (clipping makes them, a box past the image edge
becoming x1 = x2 = W), and on a box 0.1 px thin a 0.001 px float difference costs 1% of IoU. A
ResNet-50's float noise moves a decoded box by about 2e-5 of its coordinates (FCOS)."""


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU matrix [len(a), len(b)] on normalized corners (either corner order allowed); 1 where
    the corners agree to CORNER_RTOL (degenerate boxes included)."""
    a, b = _normalize(a.double()), _normalize(b.double())
    top_left = torch.maximum(a[:, None, :2], b[None, :, :2])
    bottom_right = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = (bottom_right - top_left).clamp_min(0).prod(-1)
    area_a = (a[:, 2:] - a[:, :2]).prod(-1)
    area_b = (b[:, 2:] - b[:, :2]).prod(-1)
    union = area_a[:, None] + area_b[None, :] - inter
    iou = torch.where(union > 0, inter / union.clamp_min(1e-300), torch.zeros_like(union))
    scale = torch.maximum(a.abs().amax(-1)[:, None], b.abs().amax(-1)[None, :]).clamp_min(1.0)
    same = (a[:, None, :] - b[None, :, :]).abs().amax(-1) <= CORNER_RTOL * scale
    return torch.where(same, torch.ones_like(iou), iou)


def match_image(
    image: int, ref: Detections, got: Detections, iou: float = 0.99, score_atol: float = 1e-4,
    field_tol: tuple[float, float] = (1e-4, 1e-3),
) -> ImageMatch:
    """Greedy pairing per label; ties in score visit the reference in index order. Paired
    detections' other fields must agree to ``field_tol`` (atol, rtol)."""
    matched, worst_iou, max_diff = 0, 1.0, 0.0
    problems: list[str] = []
    pairs: list[tuple[int, int]] = []
    unmatched_got = 0
    labels = sorted(set(ref.labels.tolist()) | set(got.labels.tolist()))
    for label in labels:
        r_idx = [int(i) for i in torch.nonzero(ref.labels == label).flatten()]
        g_idx = [int(i) for i in torch.nonzero(got.labels == label).flatten()]
        r_idx.sort(key=lambda i: (-float(ref.scores[i]), i))
        overlaps = box_iou(ref.boxes[r_idx], got.boxes[g_idx]) if r_idx and g_idx else None
        free = set(range(len(g_idx)))
        for row, i in enumerate(r_idx):
            score = float(ref.scores[i])
            best = None
            if overlaps is not None:
                candidates = [c for c in free if float(overlaps[row, c]) >= iou]
                best = min(candidates, key=lambda c: (abs(float(got.scores[g_idx[c]]) - score),
                                                      -float(overlaps[row, c]), c), default=None)
            if best is None:
                problems.append(f"image {image}: missing label {label} score {score:.4g} box "
                                f"{[round(v, 2) for v in ref.boxes[i].tolist()]}")
                continue
            free.remove(best)
            pairs.append((i, g_idx[best]))
            matched += 1
            worst_iou = min(worst_iou, float(overlaps[row, best]))
            max_diff = max(max_diff, abs(float(got.scores[g_idx[best]]) - score))
        unmatched_got += len(free)
        for c in sorted(free):
            j = g_idx[c]
            problems.append(f"image {image}: extra label {label} score {float(got.scores[j]):.4g} box "
                            f"{[round(v, 2) for v in got.boxes[j].tolist()]}")
    missing = len(ref) - matched
    if max_diff > score_atol:
        problems.append(f"image {image}: score differs by {max_diff:.3g} > {score_atol:g}")
    field_problems = _compare_fields(image, ref, got, pairs, field_tol)
    return ImageMatch(image, matched, missing, unmatched_got, worst_iou, max_diff,
                      tuple(problems + field_problems), len(field_problems))


def _compare_fields(
    image: int, ref: Detections, got: Detections, pairs: list[tuple[int, int]], tol: tuple[float, float]
) -> list[str]:
    """Each per-detection field of the reference, on every paired detection."""
    problems = []
    if set(ref.fields) != set(got.fields):
        problems.append(f"image {image}: per-detection fields {sorted(got.fields)}, expected {sorted(ref.fields)}")
    for name in sorted(set(ref.fields) & set(got.fields)):
        if not pairs:
            continue
        want = ref.fields[name][[i for i, _ in pairs]].double()
        have = got.fields[name][[j for _, j in pairs]].double()
        if want.shape != have.shape:
            problems.append(f"image {image}: {name} of shape {tuple(have.shape[1:])}, expected {tuple(want.shape[1:])}")
            continue
        excess = ((want - have).abs() - tol[0] - tol[1] * want.abs()).flatten(1).amax(1)
        bad = [pairs[k] for k in torch.nonzero(excess > 0).flatten().tolist()]
        if bad:
            worst = float((want - have).abs().max())
            problems.append(f"image {image}: {name} differs on {len(bad)} paired detection(s) (max diff {worst:.3g}), "
                            f"first at reference detection {bad[0][0]}")
    return problems


def compare_detections(
    name: str, ref: Sequence[Detections], got: Sequence[Detections], iou: float = 0.99, score_atol: float = 1e-4,
    field_tol: tuple[float, float] = (1e-4, 1e-3),
) -> DetectionComparison:
    if len(ref) != len(got):
        return DetectionComparison(name, [], iou, score_atol, f"{len(got)} image(s), expected {len(ref)}")
    images = [match_image(i, r, g, iou, score_atol, field_tol) for i, (r, g) in enumerate(zip(ref, got, strict=True))]
    return DetectionComparison(name, images, iou, score_atol)


def _normalize(boxes: torch.Tensor) -> torch.Tensor:
    x1, x2 = torch.minimum(boxes[:, 0], boxes[:, 2]), torch.maximum(boxes[:, 0], boxes[:, 2])
    y1, y2 = torch.minimum(boxes[:, 1], boxes[:, 3]), torch.maximum(boxes[:, 1], boxes[:, 3])
    return torch.stack([x1, y1, x2, y2], -1)
