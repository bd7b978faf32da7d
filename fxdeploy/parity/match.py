"""The one detection matcher: two results of the same detector, paired per image by label and box.

Runtimes may order equal scores differently (NMS_SPEC.md, "Comparing outputs across targets"), so
two correct results can differ row by row. Each reference detection, by descending score (ties:
the lower row first), takes the free detection of its label whose box is the same box (IoU >=
``iou``, or corners that agree to CORNER_RTOL) and whose score is closest; further ties go to the
higher IoU, then to the closer other fields, then to the lower row. Only then is every field of
every pair compared: scores, boxes (where a tolerance is given), each extra per-detection field
(keypoints, masks). The counts, and whatever stays unpaired on either side, are reported too.
A problem names the image, the row and the field.
"""

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


@dataclass(frozen=True)
class Tolerance:
    """A paired value passes when |got - want| <= atol * s + rtol * |want|. ``s`` is 1, or with
    ``of_largest`` the largest finite |want| of that field in the image (at least 1): lower()'s
    check scales by the size of what it compares, ``fxdeploy compare`` element by element."""

    atol: float
    rtol: float = 0.0
    of_largest: bool = False

    def bound(self, want: torch.Tensor, whole: torch.Tensor) -> torch.Tensor:
        scale = 1.0
        finite = whole[torch.isfinite(whole)]
        if self.of_largest and finite.numel():
            scale = max(1.0, float(finite.abs().max()))
        return self.atol * scale + self.rtol * want.abs()


@dataclass(frozen=True)
class Rules:
    """How close two detections must be. ``boxes`` None: the IoU alone judges the boxes."""

    iou: float = 0.99
    scores: Tolerance = Tolerance(1e-4)
    fields: Tolerance = Tolerance(1e-4, 1e-3)
    boxes: Tolerance | None = None


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
    max_abs: float = 0.0
    """The largest difference over paired scores, boxes and fields."""

    @property
    def ok(self) -> bool:
        return not self.problems


def box_iou(a: torch.Tensor, b: torch.Tensor, corner_rtol: float = CORNER_RTOL) -> torch.Tensor:
    """IoU matrix [len(a), len(b)] on normalized corners (either corner order allowed); 1 where the
    corners agree to ``corner_rtol`` (0: only identical boxes), degenerate boxes included."""
    a, b = _normalize(a.double()), _normalize(b.double())
    top_left = torch.maximum(a[:, None, :2], b[None, :, :2])
    bottom_right = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = (bottom_right - top_left).clamp_min(0).prod(-1)
    area_a = (a[:, 2:] - a[:, :2]).prod(-1)
    area_b = (b[:, 2:] - b[:, :2]).prod(-1)
    union = area_a[:, None] + area_b[None, :] - inter
    iou = torch.where(union > 0, inter / union.clamp_min(1e-300), torch.zeros_like(union))
    scale = torch.maximum(a.abs().amax(-1)[:, None], b.abs().amax(-1)[None, :]).clamp_min(1.0)
    same = (a[:, None, :] - b[None, :, :]).abs().amax(-1) <= corner_rtol * scale
    return torch.where(same, torch.ones_like(iou), iou)


def pair(ref: Detections, got: Detections, iou: float = 0.99) -> list[tuple[int, int]]:
    """(reference row, got row) pairs: greedy, as the module docstring says."""
    overlap = _overlap(ref, got)
    allowed = (overlap >= iou) & (_labels(ref)[:, None] == _labels(got)[None, :])
    score_gap = (_scores(ref)[:, None] - _scores(got)[None, :]).abs().nan_to_num(nan=float("inf"))
    keys = torch.stack([score_gap, -overlap, _field_gap(ref, got)], -1).tolist()
    allowed_rows = allowed.tolist()
    ranking = _scores(ref).nan_to_num(nan=float("-inf")).tolist()
    free = set(range(len(got)))
    pairs = []
    for i in sorted(range(len(ref)), key=lambda r: (-ranking[r], r)):
        candidates = [j for j in free if allowed_rows[i][j]]
        best = min(candidates, key=lambda j: (*keys[i][j], j), default=None)
        if best is not None:
            free.remove(best)
            pairs.append((i, best))
    return pairs


def match_image(image: int, ref: Detections, got: Detections, rules: Rules | None = None) -> ImageMatch:
    """Pair one image's detections, then check the counts, the unpaired rows and every field."""
    rules = rules or Rules()
    pairs = pair(ref, got, rules.iou)
    problems = [] if len(ref) == len(got) else [f"image {image}: {len(got)} detection(s), expected {len(ref)}"]
    paired_ref, paired_got = {i for i, _ in pairs}, {j for _, j in pairs}
    problems += [f"image {image} row {i}: missing {describe(ref, i)}" for i in range(len(ref)) if i not in paired_ref]
    problems += [f"image {image}: extra {describe(got, j)} (row {j} of the result)"
                 for j in range(len(got)) if j not in paired_got]
    score_diff, score_problem = _check(image, "score", ref.scores, got.scores, pairs, rules.scores)
    box_diff, box_problem = _check(image, "box", ref.boxes, got.boxes, pairs, rules.boxes)
    field_diff, field_problems = _check_fields(image, ref, got, pairs, rules.fields)
    found = [p for p in (score_problem, box_problem) if p] + field_problems
    overlap = _overlap(ref, got)
    worst_iou = min((float(overlap[i, j]) for i, j in pairs), default=1.0)
    return ImageMatch(image, len(pairs), len(ref) - len(pairs), len(got) - len(pairs), worst_iou, score_diff,
                      tuple(problems + found), len(field_problems), max(score_diff, box_diff, field_diff))


def describe(dets: Detections, row: int) -> str:
    """A detection as a message shows it: its label, score and box, or else its first field."""
    parts = []
    if dets.labels is not None:
        parts.append(f"label {int(dets.labels[row])}")
    if dets.scores is not None:
        parts.append(f"score {float(dets.scores[row]):.4g}")
    if dets.boxes is not None:
        parts.append(f"box {[round(v, 2) for v in dets.boxes[row].tolist()]}")
    if not parts and dets.fields:
        name = next(iter(dets.fields))
        parts.append(f"{name} {dets.fields[name][row].flatten().tolist()[:6]}")
    return " ".join(parts)


def _check_fields(
    image: int, ref: Detections, got: Detections, pairs: list[tuple[int, int]], tol: Tolerance
) -> tuple[float, list[str]]:
    """Each per-detection field of the reference, on every pair."""
    problems = []
    if set(ref.fields) != set(got.fields):
        problems.append(f"image {image}: per-detection fields {sorted(got.fields)}, expected {sorted(ref.fields)}")
    worst = 0.0
    for name in sorted(set(ref.fields) & set(got.fields)):
        diff, problem = _check(image, name, ref.fields[name], got.fields[name], pairs, tol)
        worst = max(worst, diff)
        problems += [problem] if problem else []
    return worst, problems


def _check(
    image: int, name: str, want_all: torch.Tensor | None, have_all: torch.Tensor | None,
    pairs: list[tuple[int, int]], tol: Tolerance | None,
) -> tuple[float, str | None]:
    """The largest paired difference of one field, and a problem naming the first pair past ``tol``
    (None: only measured). NaN or Inf where a value is due fails: NMS never keeps a NaN score."""
    if want_all is None or have_all is None or not pairs:
        return 0.0, None
    want = want_all[[i for i, _ in pairs]].double()
    have = have_all[[j for _, j in pairs]].double()
    if want.shape != have.shape:
        return float("inf"), f"image {image}: {name} of shape {tuple(have.shape[1:])}, expected {tuple(want.shape[1:])}"
    if want.numel() == 0:
        return 0.0, None
    diff = (want - have).abs().nan_to_num(nan=float("inf"))
    worst = float(diff.max())
    if tol is None:
        return worst, None
    excess = diff - tol.bound(want, want_all.double())
    bad = (excess > 0).reshape(len(pairs), -1).any(1).nonzero().flatten().tolist()
    if not bad:
        return worst, None
    ref_row, _ = pairs[bad[0]]
    allowed = float(tol.bound(want, want_all.double())[bad[0]].min())
    more = f" (and {len(bad) - 1} more detection(s))" if len(bad) > 1 else ""
    return worst, (f"image {image} row {ref_row}: {name} differs by {float(diff[bad[0]].max()):.3g} "
                   f"> {allowed:.3g}{more}")


def _overlap(ref: Detections, got: Detections) -> torch.Tensor:
    if ref.boxes is None or got.boxes is None:
        return torch.ones(len(ref), len(got), dtype=torch.float64)
    return box_iou(ref.boxes, got.boxes)


def _labels(dets: Detections) -> torch.Tensor:
    return dets.labels.long() if dets.labels is not None else torch.zeros(len(dets), dtype=torch.long)


def _scores(dets: Detections) -> torch.Tensor:
    return dets.scores.double() if dets.scores is not None else torch.zeros(len(dets), dtype=torch.float64)


def _field_gap(ref: Detections, got: Detections) -> torch.Tensor:
    """[len(ref), len(got)]: the largest difference over the fields both sides share."""
    gap = torch.zeros(len(ref), len(got), dtype=torch.float64)
    for name in set(ref.fields) & set(got.fields):
        a, b = ref.fields[name].double(), got.fields[name].double()
        if a.shape[1:] != b.shape[1:] or a[0:1].numel() == 0 or not len(a) or not len(b):
            continue
        distance = torch.cdist(a.reshape(len(a), -1), b.reshape(len(b), -1), p=float("inf"))
        gap = torch.maximum(gap, distance.nan_to_num(nan=float("inf")))
    return gap


def _normalize(boxes: torch.Tensor) -> torch.Tensor:
    x1, x2 = torch.minimum(boxes[:, 0], boxes[:, 2]), torch.maximum(boxes[:, 0], boxes[:, 2])
    y1, y2 = torch.minimum(boxes[:, 1], boxes[:, 3]), torch.maximum(boxes[:, 1], boxes[:, 3])
    return torch.stack([x1, y1, x2, y2], -1)
