"""Detection-aware comparison of two multiclass_nms results (NMS_SPEC.md, "Comparing outputs").

Runtimes may order equal scores differently, so element-wise comparison is only valid on tie-free
inputs. Here detections are paired per image by label and IoU >= ``iou`` (the same box), the
closest score first; then the paired scores are compared. Used by the op tests and by the
end-to-end suites of every target.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass
class MatchReport:
    matched: int = 0
    unmatched_ref: int = 0
    unmatched_got: int = 0
    worst_iou: float = 1.0
    max_score_diff: float = 0.0
    num_dets_ref: list[int] = field(default_factory=list)
    num_dets_got: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and self.unmatched_ref == 0 and self.unmatched_got == 0


CORNER_RTOL = 5e-5
"""Two boxes are also the same box when every corner agrees to this tolerance, relative to the
largest coordinate: IoU has no value for zero-area boxes (clipping makes them: a box below the
image becomes y1 = y2 = H), and on a box 0.1 px thin a 0.001 px float difference costs 1% of IoU.
A ResNet-50's float noise moves a decoded box by about 2e-5 of its coordinates (FCOS)."""


def box_iou(a: Sequence[float], b: Sequence[float]) -> float:
    """IoU on normalized corners; identical boxes count as IoU 1, even when degenerate."""
    if list(a) == list(b):
        return 1.0
    ax1, ax2 = sorted((float(a[0]), float(a[2])))
    ay1, ay2 = sorted((float(a[1]), float(a[3])))
    bx1, bx2 = sorted((float(b[0]), float(b[2])))
    by1, by2 = sorted((float(b[1]), float(b[3])))
    inter = max(0.0, min(ax2, bx2) - max(ax1, bx1)) * max(0.0, min(ay2, by2) - max(ay1, by1))
    union = (ax2 - ax1) * (ay2 - ay1) + (bx2 - bx1) * (by2 - by1) - inter
    return inter / union if union > 0 else 0.0


def same_box(a: Sequence[float], b: Sequence[float], iou: float) -> bool:
    if box_iou(a, b) >= iou:
        return True
    scale = max(1.0, *(abs(float(v)) for v in (*a, *b)))
    return max(abs(float(u) - float(v)) for u, v in zip(a, b, strict=True)) <= CORNER_RTOL * scale


def _detections(result: Sequence[torch.Tensor], image: int) -> list[tuple[int, float, list[float]]]:
    boxes, scores, labels, num_dets = result[:4]
    count = int(num_dets[image])
    return [(int(labels[image, k]), float(scores[image, k]), boxes[image, k].tolist()) for k in range(count)]


def match_detections(
    ref: Sequence[torch.Tensor], got: Sequence[torch.Tensor], iou: float = 0.99, score_atol: float = 1e-5
) -> MatchReport:
    """Pair ``got`` detections with ``ref`` ones (label equal, IoU >= iou); report the rest."""
    report = MatchReport()
    report.num_dets_ref = [int(n) for n in ref[3]]
    report.num_dets_got = [int(n) for n in got[3]]
    if ref[0].shape != got[0].shape:
        report.problems.append(f"det_boxes shapes differ: {tuple(ref[0].shape)} vs {tuple(got[0].shape)}")
        return report
    for image in range(ref[0].shape[0]):
        want, have = _detections(ref, image), _detections(got, image)
        free = list(range(len(have)))
        for label, score, box in want:
            best, best_key = None, None
            for j in free:
                overlap = box_iou(box, have[j][2])
                if have[j][0] != label or not same_box(box, have[j][2], iou):
                    continue
                key = (abs(have[j][1] - score), -overlap)
                if best_key is None or key < best_key:
                    best, best_key = j, key
            if best is None:
                report.unmatched_ref += 1
                report.problems.append(f"image {image}: no match for label {label} score {score} box {box}")
                continue
            free.remove(best)
            report.matched += 1
            report.worst_iou = min(report.worst_iou, box_iou(box, have[best][2]))
            diff = abs(have[best][1] - score)
            if diff == diff:  # both NaN-free here; NaN never survives NMS
                report.max_score_diff = max(report.max_score_diff, diff)
        report.unmatched_got += len(free)
        for j in free:
            report.problems.append(f"image {image}: unexpected detection {have[j]}")
    if report.max_score_diff > score_atol:
        report.problems.append(f"max score difference {report.max_score_diff} > {score_atol}")
    return report


def assert_detections_match(
    ref: Sequence[torch.Tensor],
    got: Sequence[torch.Tensor],
    iou: float = 0.99,
    score_atol: float = 1e-5,
    *,
    exact_counts: bool = True,
) -> MatchReport:
    """Fail with the first problems found; with ``exact_counts`` num_dets must agree too."""
    report = match_detections(ref, got, iou=iou, score_atol=score_atol)
    problems = list(report.problems)
    if exact_counts and report.num_dets_ref != report.num_dets_got:
        problems.insert(0, f"num_dets differ: {report.num_dets_ref} vs {report.num_dets_got}")
    assert not problems, "detections differ:\n  " + "\n  ".join(problems[:10])
    return report


def padding_problems(result: Sequence[torch.Tensor]) -> list[str]:
    """Rows at positions >= num_dets must hold boxes 0, score 0, label -1 (and index -1)."""
    boxes, scores, labels, num_dets = result[:4]
    problems = []
    positions = torch.arange(boxes.shape[1]).unsqueeze(0)
    pad = positions >= num_dets.unsqueeze(1)
    if bool((boxes[pad] != 0).any()) or bool((scores[pad] != 0).any()):
        problems.append("padding rows hold non-zero boxes or scores")
    if bool((labels[pad] != -1).any()):
        problems.append("padding rows hold labels other than -1")
    if len(result) > 4 and bool((result[4][pad] != -1).any()):
        problems.append("padding rows hold indices other than -1")
    if bool((labels[~pad] < 0).any()):
        problems.append("a detection row has a negative label")
    return problems
