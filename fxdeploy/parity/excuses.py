"""What float noise may flip between two correct results, and nothing else (docs/checking.md).

Two runtimes compute a detector's scores and boxes to a few ulps of each other, and that is
enough to move a decision that sits at a threshold. After pairing (``fxdeploy.parity.match``),
a detection left unpaired on one side fails the comparison unless one of these rules explains
it, and each rule only reads what the graph says decided membership (the thresholds recorded in
the manifest's output leaves, ``fxdeploy.passes.output_rows``):

- ``score_threshold``: its score lies within ``score_eps`` of a score threshold the graph compared
  scores with;
- ``iou_threshold``: its IoU with a detection of its label that scores at least as high (on either
  side) lies within ``IOU_EPS`` of the NMS's IoU threshold; or it overlaps, above the threshold,
  a detection of its label that scores at least as high and is itself excused on the other side
  (what the flip of that one changed: it no longer suppresses this one);
- ``tie``: it and a detection unpaired on the other side score within ``score_eps`` of each
  other and of the lowest score on their sides: a cap (``keep_top_k``, ``[:k]``, a top-k's last
  rank) took one of two near-equal candidates. Paired rows that come in another order count as
  ``tie`` where their keys are within ``score_eps``, and fail otherwise. And at an NMS: it and a
  detection of its label unpaired on the other side score within ``score_eps`` of each other and
  overlap above the IoU threshold, and eager kept another detection at that score: of two tied
  candidates that suppress each other the NMS keeps the one its sort visited first, and a sort
  leaves near-equal keys in either order (torch's default CPU sort is not stable).

A box shifted, a keypoint one anchor off or a detection dropped is none of these, and fails.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch

from fxdeploy.parity.boxes import Detections, box_iou

IOU_EPS = 1e-3
"""How far from the NMS's IoU threshold an IoU may be and still flip: boxes that agree to 1e-5 of
their size (float32 kernels, batched_nms's class offsets) move an IoU by about 1e-4."""


@dataclass(frozen=True)
class Context:
    """What decided which rows exist, from the graph; empty: nothing is excused."""

    iou_threshold: float | None = None
    score_thresholds: tuple[float, ...] = ()
    score_eps: float = 0.0
    order: str = "none"
    """"score": rows come by descending score, near-equal scores in either order; "eager": in
    eager's order (a selection keeps its input's order), near-equal scores in either order where
    eager's rows come by score (a selection of ranked rows); "none": no order is checked."""
    capped: bool = False
    """Whether a cap may cut the rows (an NMS's keep_top_k or ``[:k]``, a top-k): the tie rule."""


def excuse(
    ref: Detections, got: Detections, pairs: list[tuple[int, int]], ctx: Context
) -> tuple[Counter[str], list[int], list[int]]:
    """The excuses used, and the unpaired rows of ``ref`` and of ``got`` that none explains."""
    sides = (ref, got)
    unpaired = (
        sorted(set(range(len(ref))) - {i for i, _ in pairs}),
        sorted(set(range(len(got))) - {j for _, j in pairs}),
    )
    reasons: dict[tuple[int, int], str] = {}
    for side in (0, 1):
        for row in unpaired[side]:
            reason = _root_reason(sides, side, row, ctx)
            if reason is not None:
                reasons[side, row] = reason
    _ties(sides, unpaired, ctx, reasons)
    _nms_ties(sides, unpaired, ctx, reasons)
    _cascade(sides, unpaired, ctx, reasons)
    left = tuple([row for row in unpaired[side] if (side, row) not in reasons] for side in (0, 1))
    return Counter(reasons.values()), left[0], left[1]


def out_of_order(
    ref: Detections, got: Detections, pairs: list[tuple[int, int]], ctx: Context
) -> tuple[int, str | None]:
    """(swaps excused as ties, the first pair out of order that no tie explains)."""
    if ctx.order == "none" or len(pairs) < 2:
        return 0, None
    scores = _scores(ref)
    by_score = ref.scores is not None and not bool((scores[1:] > scores[:-1] + ctx.score_eps).any())
    if ctx.order == "score" and not by_score:
        return 0, None  # eager's rows do not come by score: no order to hold the result to
    ordered = sorted(pairs)
    refs = torch.tensor([i for i, _ in ordered])
    gots = torch.tensor([j for _, j in ordered])
    inverted = (gots[:, None] > gots[None, :]).triu(diagonal=1)  # an earlier row of eager's comes later
    tied = torch.zeros_like(inverted)
    if by_score:
        keys = scores[refs]
        tied = (keys[:, None] - keys[None, :]).abs() <= ctx.score_eps
    wrong = (inverted & ~tied).nonzero()
    if len(wrong):
        a, b = wrong[0].tolist()
        return 0, (f"rows {int(refs[a])} and {int(refs[b])} come in the other order "
                   f"(rows {int(gots[a])} and {int(gots[b])} of the result)")
    return int((inverted & tied).sum()), None


def _root_reason(sides: tuple[Detections, Detections], side: int, row: int, ctx: Context) -> str | None:
    dets = sides[side]
    score = float(_scores(dets)[row])
    if any(abs(score - t) <= ctx.score_eps for t in ctx.score_thresholds):
        return "score_threshold"
    if ctx.iou_threshold is None or dets.boxes is None:
        return None
    for other_side, other in enumerate(sides):
        rivals = _rivals(dets, row, other, ctx, exclude=row if other_side == side else None)
        if rivals.numel() and bool(((_ious(dets, row, other, rivals) - ctx.iou_threshold).abs() <= IOU_EPS).any()):
            return "iou_threshold"
    return None


def _ties(
    sides: tuple[Detections, Detections], unpaired: tuple[list[int], list[int]], ctx: Context,
    reasons: dict[tuple[int, int], str],
) -> None:
    """Pairs of unpaired rows, one a side, at their sides' lowest scores and within eps of each other,
    where both sides hold as many rows (the cap took one of two near-equal candidates)."""
    if not ctx.capped or any(d.scores is None or not len(d) for d in sides) or len(sides[0]) != len(sides[1]):
        return
    lowest = [float(_scores(d).min()) for d in sides]
    free = [[r for r in unpaired[s] if (s, r) not in reasons and float(_scores(sides[s])[r]) <= low + ctx.score_eps]
            for s, low in enumerate(lowest)]
    for r in free[0]:
        score = float(_scores(sides[0])[r])
        match = next((g for g in free[1] if (1, g) not in reasons
                      and abs(float(_scores(sides[1])[g]) - score) <= ctx.score_eps), None)
        if match is not None:
            reasons[0, r] = reasons[1, match] = "tie"


def _nms_ties(
    sides: tuple[Detections, Detections], unpaired: tuple[list[int], list[int]], ctx: Context,
    reasons: dict[tuple[int, int], str],
) -> None:
    """Pairs of unpaired rows, one a side, of a label, within eps of each other, that suppress each
    other; only at a score eager shows tied (another row it kept within eps): a box moved onto an
    overlapping position at an unshared score is a wrong artifact, not a tie."""
    if ctx.iou_threshold is None or any(d.boxes is None or d.scores is None for d in sides):
        return
    (ref, got), eps = sides, ctx.score_eps
    ref_scores, got_scores = _scores(ref), _scores(got)
    for r in unpaired[0]:
        if (0, r) in reasons or int(((ref_scores - ref_scores[r]).abs() <= eps).sum()) < 2:
            continue
        free = torch.tensor([g for g in unpaired[1] if (1, g) not in reasons], dtype=torch.long)
        if not free.numel():
            return
        rivals = free[(_labels(got)[free] == _labels(ref)[r]) & ((got_scores[free] - ref_scores[r]).abs() <= eps)]
        if rivals.numel():
            overlapping = rivals[_ious(ref, r, got, rivals) > ctx.iou_threshold - IOU_EPS]
            if overlapping.numel():
                reasons[0, r] = reasons[1, int(overlapping[0])] = "tie"


def _cascade(
    sides: tuple[Detections, Detections], unpaired: tuple[list[int], list[int]], ctx: Context,
    reasons: dict[tuple[int, int], str],
) -> None:
    """Rows whose suppression an excused flip on the other side explains, until none is added."""
    if ctx.iou_threshold is None or any(d.boxes is None for d in sides):
        return
    added = True
    while added:
        added = False
        for side in (0, 1):
            excused = torch.tensor([r for s, r in reasons if s == 1 - side], dtype=torch.long)
            for row in unpaired[side]:
                if (side, row) in reasons or not excused.numel():
                    continue
                rivals = _rivals(sides[side], row, sides[1 - side], ctx, candidates=excused)
                if rivals.numel() and bool((_ious(sides[side], row, sides[1 - side], rivals)
                                            > ctx.iou_threshold - IOU_EPS).any()):
                    reasons[side, row] = "iou_threshold"
                    added = True


def _rivals(
    dets: Detections, row: int, other: Detections, ctx: Context, exclude: int | None = None,
    candidates: torch.Tensor | None = None,
) -> torch.Tensor:
    """Rows of ``other`` (or of ``candidates``) with ``row``'s label that score at least as high."""
    rows = torch.arange(len(other)) if candidates is None else candidates
    same = _labels(other)[rows] == _labels(dets)[row]
    higher = _scores(other)[rows] >= _scores(dets)[row] - ctx.score_eps
    keep = same & higher & (rows != (exclude if exclude is not None else -1))
    return rows[keep]


def _ious(dets: Detections, row: int, other: Detections, rows: torch.Tensor) -> torch.Tensor:
    return box_iou(dets.boxes[row : row + 1], other.boxes[rows], corner_rtol=0.0)[0]


def _scores(dets: Detections) -> torch.Tensor:
    if dets.scores is None:
        return torch.zeros(len(dets), dtype=torch.float64)
    return dets.scores.double().nan_to_num(nan=float("-inf"))


def _labels(dets: Detections) -> torch.Tensor:
    return dets.labels.long() if dets.labels is not None else torch.zeros(len(dets), dtype=torch.long)
