"""lower()'s check of the output leaves that hold rows: per group of leaves, per image, as sets.

The groups, their roles and their specs are ``fxdeploy.parity.rows``'s; the pairing and the
per-field checks ``fxdeploy.parity.match``'s; what float noise may flip ``fxdeploy.parity.excuses``'s.
An NMS's rows are first cut at its count (``num_dets``, each side by its own) where an output
holds it, or at the docs/nms-spec.md padding (label -1) where the group has labels.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import torch

from fxdeploy.errors import LoweringError
from fxdeploy.parity.boxes import Detections
from fxdeploy.parity.match import Rules, Tolerance, match_image
from fxdeploy.parity.rows import RowsSpec, group_rows, per_image, roles, row_columns

SCORE_RTOL = 3e-3
"""Scores agree to ``atol`` plus this fraction of the score: a second-stage softmax (Faster R-CNN)
moves a 0.3 score by 3e-4 between runtimes, and a 0.077 score by 2.1e-4 (2.7e-3 of it) where
ONNX Runtime runs the box head on every image's proposals in one matmul (the graph vectorized)."""


INT8_MIN_PAIRED = 0.95
"""An INT8 artifact's detections need not be eager's set: quantization moves scores across the
threshold, argmaxes between near-equal classes, and NMS between overlapping boxes. At least this
share of eager's detections must pair (label, IoU >= ``INT8_IOU``), each pair within the check's
tolerance; the unpaired ones are counted in the manifest (``int8_unpaired``)."""
INT8_IOU = 0.9


def compare_rows(
    got: list[Any], want: list[Any], leaves: dict[int, tuple[tuple[int, ...], RowsSpec]], atol: float, where: str,
    trims: dict[int, int], int8: bool = False,
) -> tuple[float, dict[str, int]]:
    """The largest paired difference and the excuses used; LoweringError on the first image whose
    rows differ beyond them. Every paired value must agree to ``atol`` scaled by the largest of its
    field in the image; ``trims``: row leaf -> the count leaf that cuts its padded rows. ``int8``:
    the sets may differ (``INT8_MIN_PAIRED``), and rows pair at IoU >= ``INT8_IOU``."""
    near = Tolerance(atol, of_largest=True)
    rules = Rules(INT8_IOU if int8 else Rules.iou, Tolerance(atol, SCORE_RTOL, of_largest=True), near, near)
    paired, total = 0, 0
    reference, result = dict(enumerate(want)), dict(enumerate(got))
    worst, excused = 0.0, Counter[str]()
    for group in group_rows(leaves):
        named = roles(group, reference, group.spec.key)
        columns = row_columns(group, reference)
        count = next((trims[i] for i in group.indices if i in trims), None)
        ref_padded, got_padded = per_image(group, reference, named, columns), per_image(group, result, named, columns)
        ref_images = _valid(ref_padded, want[count] if count is not None else None)
        got_images = _valid(got_padded, got[count] if count is not None else None)
        for image, (ref, have) in enumerate(zip(ref_images, got_images, strict=True)):
            ctx = group.spec.context(_score_eps(ref, atol))
            if len(ref) < len(ref_padded[image]) or len(have) < len(got_padded[image]):
                ctx = replace(ctx, capped=False)  # padding rows left over: the cap did not cut
            matched = match_image(image, ref, have, rules, ctx)
            problems = matched.problems[matched.set_problems :] if int8 else matched.problems
            if problems:
                raise LoweringError(f"{where}: {group.name}: " + "; ".join(problems[:3]))
            worst = max(worst, matched.max_abs)
            excused.update(matched.excused)
            paired, total = paired + matched.matched, total + len(ref)
    if int8 and paired < INT8_MIN_PAIRED * total:
        raise LoweringError(f"{where}: {paired} of eager's {total} detections paired (label, IoU >= {INT8_IOU}); "
                            f"an INT8 artifact must pair at least {INT8_MIN_PAIRED:.0%}")
    if int8 and total > paired:
        excused["int8_unpaired"] += total - paired
    return worst, dict(excused)


def _valid(images: list[Detections], counts: torch.Tensor | None) -> list[Detections]:
    """Each image's rows before its count, or without the NMS padding (label -1)."""
    if counts is not None:
        return [_rows(d, torch.arange(len(d)) < int(n)) for d, n in zip(images, counts.flatten().tolist(), strict=True)]
    return [_rows(d, d.labels >= 0) if d.labels is not None else d for d in images]


def _rows(dets: Detections, keep: torch.Tensor) -> Detections:
    if bool(keep.all()):
        return dets
    cut = [None if t is None else t[keep] for t in (dets.boxes, dets.scores, dets.labels)]
    return Detections(*cut, {name: t[keep] for name, t in dets.fields.items()})


def _score_eps(ref: Detections, atol: float) -> float:
    """How far apart two scores of this image may be and still be the same score: the check's own
    tolerance, scaled by the largest score (as the paired scores are compared)."""
    if ref.scores is None or not len(ref):
        return atol
    finite = ref.scores.double()[torch.isfinite(ref.scores.double())]
    return atol * max(1.0, float(finite.abs().max())) if finite.numel() else atol
