"""The one detection matcher: two results of the same detector, paired per image by label and box.

Runtimes may order equal scores differently (docs/nms-spec.md, "Comparing outputs across targets"), so
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

from fxdeploy.parity.boxes import Detections, box_iou
from fxdeploy.parity.excuses import Context, excuse, out_of_order


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
    excused: dict[str, int] = field(default_factory=dict)
    """How often each rule of fxdeploy.parity.excuses excused a difference."""
    set_problems: int = 0
    """How many of ``problems`` (the first ones) are about the set (counts, missing or extra rows,
    order) rather than about paired detections' values."""

    @property
    def ok(self) -> bool:
        return not self.problems


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


def match_image(
    image: int, ref: Detections, got: Detections, rules: Rules | None = None, ctx: Context | None = None
) -> ImageMatch:
    """Pair one image's detections, then check the unpaired rows (excused only by ``ctx``'s rules,
    fxdeploy.parity.excuses), the order where ``ctx`` gives one, the counts and every field."""
    rules, ctx = rules or Rules(), ctx or Context()
    pairs = pair(ref, got, rules.iou)
    excused, missing, extra = excuse(ref, got, pairs, ctx)
    swaps, order_problem = out_of_order(ref, got, pairs, ctx)
    excused["tie"] += swaps
    unexplained = (missing or extra) and len(ref) != len(got)
    problems = [f"image {image}: {len(got)} detection(s), expected {len(ref)}"] if unexplained else []
    problems += [f"image {image} row {i}: missing {describe(ref, i)}" for i in missing]
    problems += [f"image {image}: extra {describe(got, j)} (row {j} of the result)" for j in extra]
    problems += [f"image {image}: {order_problem}"] if order_problem else []
    set_problems = len(problems)
    score_diff, score_problem = _check(image, "score", ref.scores, got.scores, pairs, rules.scores)
    box_diff, box_problem = _check(image, "box", ref.boxes, got.boxes, pairs, rules.boxes)
    field_diff, field_problems, mask_excuses = _check_fields(image, ref, got, pairs, rules.fields)
    excused["mask_iou"] += mask_excuses
    found = [p for p in (score_problem, box_problem) if p] + field_problems
    overlap = _overlap(ref, got)
    worst_iou = min((float(overlap[i, j]) for i, j in pairs), default=1.0)
    return ImageMatch(image, len(pairs), len(ref) - len(pairs), len(got) - len(pairs), worst_iou, score_diff,
                      tuple(problems + found), len(field_problems), max(score_diff, box_diff, field_diff),
                      {k: v for k, v in excused.items() if v}, set_problems)


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
) -> tuple[float, list[str], int]:
    """Each per-detection field of the reference, on every pair; thresholded masks by their IoU."""
    problems = []
    if set(ref.fields) != set(got.fields):
        problems.append(f"image {image}: per-detection fields {sorted(got.fields)}, expected {sorted(ref.fields)}")
    worst, masks = 0.0, 0
    for name in sorted(set(ref.fields) & set(got.fields)):
        if is_mask(ref.fields[name]):
            flipped, problem = _check_masks(image, name, ref.fields[name], got.fields[name], pairs)
            masks += flipped
        else:
            diff, problem = _check(image, name, ref.fields[name], got.fields[name], pairs, tol)
            worst = max(worst, diff)
        problems += [problem] if problem else []
    return worst, problems, masks


MASK_IOU = 0.99
"""Thresholded masks of a pair must overlap this much: float noise flips the few pixels whose value
sits at the threshold, while a mask shifted by one row of a 100-row object loses 2%."""


def is_mask(field: torch.Tensor) -> bool:
    """A thresholded mask: [n, h, w] of booleans, or of floats that are all 0 or 1 (h, w > 3: not
    keypoints, whose last dim holds 2 or 3 coordinates)."""
    if field.dim() != 3 or field.numel() == 0 or min(field.shape[1:]) <= 3:
        return False
    return field.dtype == torch.bool or bool(((field == 0) | (field == 1)).all())


def _check_masks(
    image: int, name: str, want: torch.Tensor, have: torch.Tensor, pairs: list[tuple[int, int]]
) -> tuple[int, str | None]:
    """(pairs whose masks differ within MASK_IOU, the first pair past it)."""
    flipped = 0
    for i, j in pairs:
        a, b = want[i].bool(), have[j].bool() if have[j].dtype == torch.bool else have[j] != 0
        if a.shape != b.shape:
            return flipped, f"image {image} row {i}: {name} of shape {tuple(b.shape)}, expected {tuple(a.shape)}"
        union = int((a | b).sum())
        iou = int((a & b).sum()) / union if union else 1.0
        if iou < MASK_IOU:
            return flipped, f"image {image} row {i}: {name} overlaps eager's by IoU {iou:.4f} < {MASK_IOU}"
        flipped += int(iou < 1.0)
    return flipped, None


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
