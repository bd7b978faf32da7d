"""Detection-aware comparison for ``fxdeploy compare`` (docs/nms-spec.md, "Comparing outputs across targets").

The pairing and the per-field checks are fxdeploy.parity.match's, the one matcher that lower()'s
own check and the tests use too; here its per-image results become one row of a compare report.
Padding rows past ``num_dets`` never reach it (fxdeploy.parity.recognize drops them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from fxdeploy.parity.boxes import Detections
from fxdeploy.parity.excuses import Context
from fxdeploy.parity.match import ImageMatch, Rules, Tolerance, match_image
from fxdeploy.parity.rows import as_rows, columns_of


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
        return not self.problem and all(m.ok for m in self.images)

    @property
    def matched(self) -> int:
        return sum(m.matched for m in self.images)

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
        missing = sum(m.unmatched_ref for m in self.images)
        extra = sum(m.unmatched_got for m in self.images)
        text = (f"{self.matched} matched, {missing} missing, {extra} extra over {len(self.images)} image(s); "
                f"worst IoU {self.worst_iou:.4f}, max score diff {self.max_abs:.3g}")
        problems = [p for m in self.images for p in m.problems]
        return text + ("; " + "; ".join(problems[:5]) if problems else "")


def compare_detections(
    name: str, ref: Sequence[Detections], got: Sequence[Detections], iou: float = 0.99, score_atol: float = 1e-4,
    field_tol: tuple[float, float] = (1e-4, 1e-3), ctx: Context | None = None,
) -> DetectionComparison:
    """Scores to ``score_atol`` plus ``field_tol``'s rtol of the score (a second-stage softmax moves
    a 0.3 score by 3e-4 between runtimes: Faster R-CNN), other per-detection fields to ``field_tol``
    (atol, rtol) element by element; the boxes are judged by their IoU alone. ``ctx``: the rows'
    NMS, whose rules excuse what float noise can flip (a score within ``score_atol`` of its
    threshold); none excused without it."""
    if len(ref) != len(got):
        return DetectionComparison(name, [], iou, score_atol, f"{len(got)} image(s), expected {len(ref)}")
    rules = Rules(iou, Tolerance(score_atol, field_tol[1]), Tolerance(*field_tol))
    pairs = enumerate(zip(ref, got, strict=True))
    images = [match_image(i, r, g, rules, _scaled(ctx, r, score_atol)) for i, (r, g) in pairs]
    return DetectionComparison(name, images, iou, score_atol)


def _scaled(ctx: Context | None, ref: Detections, score_atol: float) -> Context | None:
    """``ctx`` with two scores the same within ``score_atol`` of the image's largest score."""
    if ctx is None:
        return None
    largest = float(ref.scores.double().abs().max()) if ref.scores is not None and len(ref) else 1.0
    return dataclasses.replace(ctx, score_eps=score_atol * max(1.0, largest))


def compare_row_tensor(
    name: str, ref: torch.Tensor, got: torch.Tensor, ctx: Context, score_atol: float,
    field_tol: tuple[float, float] = (1e-4, 1e-3),
) -> DetectionComparison:
    """One image's rows held in one tensor [n, F] (a substitution's unpacked detections,
    ``fxdeploy.parity.probe``): paired as rows, their columns' roles read off the reference."""
    if ref.dim() != 2 or got.dim() != 2 or ref.shape[1] != got.shape[1]:
        return DetectionComparison(name, [], problem=f"rows of shape {tuple(got.shape)}, expected {tuple(ref.shape)}")
    columns = columns_of(ref[None])
    rules = Rules(0.99, Tolerance(score_atol), Tolerance(*field_tol))
    want, have = as_rows(ref, columns), as_rows(got, columns)
    match = match_image(0, want, have, rules, _scaled(ctx, want, score_atol))
    return DetectionComparison(name, [match], 0.99, score_atol)
