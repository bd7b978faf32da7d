"""lower()'s check excuses only what float noise can flip (fxdeploy/parity/excuses.py, docs/checking.md).

For each rule: a near-tie that needs it (the check refuses without the rule's context, and passes
with it, counting the excuse), and a wrong artifact that still fails under it: a box shifted, a
keypoint one anchor off, a mask shifted by a row, a detection missing, rows out of order.
"""

from __future__ import annotations

import pytest
import torch

from fxdeploy.errors import LoweringError
from fxdeploy.parity.rows import RowsSpec
from fxdeploy.parity.verify import compare

NMS = RowsSpec(0, "nms", iou_threshold=0.45, score_thresholds=(0.25,))
BARE = RowsSpec(0)
"""The same rows with nothing recorded about what decided them: nothing can be excused."""


def _dets(boxes: list[list[float]], scores: list[float], labels: list[int], **fields: torch.Tensor) -> list:
    return [torch.tensor(boxes), torch.tensor(scores), torch.tensor(labels), *fields.values()]


def _check(got: list, want: list, spec: RowsSpec = NMS) -> dict[str, int]:
    return compare("example", [], got, want, 1e-4, "onnxruntime", [spec] * len(want)).excused


REF = _dets(
    [[0, 0, 10, 10], [40, 40, 60, 60], [100, 100, 130, 120], [0, 0, 9, 9.5]],
    [0.9, 0.8, 0.7, 0.6], [1, 2, 1, 3],
)


def _without(dets: list, row: int) -> list:
    keep = [i for i in range(len(dets[1])) if i != row]
    return [t[keep] for t in dets]


def _with(dets: list, box: list[float], score: float, label: int) -> list:
    extra = [torch.tensor([box]), torch.tensor([score]), torch.tensor([label])]
    rows = [torch.cat([t, e]) for t, e in zip(dets, extra, strict=True)]
    order = rows[1].argsort(descending=True, stable=True)
    return [t[order] for t in rows]


def test_a_detection_at_the_score_threshold_may_be_on_one_side_only() -> None:
    ref = _with(REF, [200, 200, 220, 220], 0.25003, 4)
    with pytest.raises(LoweringError, match="missing label 4 score 0.25"):
        _check(REF, ref, BARE)
    assert _check(REF, ref) == {"score_threshold": 1}


def test_a_missing_detection_above_the_threshold_still_fails() -> None:
    with pytest.raises(LoweringError, match="row 1: missing label 2 score 0.8"):
        _check(_without(REF, 1), REF)


def test_a_box_at_the_iou_threshold_may_be_kept_on_one_side_only() -> None:
    """[0, 0, 10, 10] and [5.5, 0, 15.5, 10] overlap by IoU 45/155 = 0.2903; [3.1, 0, 13.1, 10] by
    69/131 = 0.52672; [3.793, 0, 13.793, 10] by 0.45004, at the NMS's 0.45."""
    at_threshold = _with(REF, [3.793, 0, 13.793, 10], 0.5, 1)
    with pytest.raises(LoweringError, match="missing label 1 score 0.5"):
        _check(REF, at_threshold, BARE)
    assert _check(REF, at_threshold) == {"iou_threshold": 1}
    assert _check(at_threshold, REF) == {"iou_threshold": 1}  # either side


def test_a_box_clear_of_the_iou_threshold_must_agree() -> None:
    for box in ([5.5, 0, 15.5, 10], [3.1, 0, 13.1, 10]):
        with pytest.raises(LoweringError, match="label 1 score 0.5"):
            _check(REF, _with(REF, box, 0.5, 1))


def test_what_an_excused_flip_suppresses_is_excused_with_it() -> None:
    """Eager keeps A (IoU 0.45004 with the 0.9 box) and so suppresses B (IoU 0.8 with A); the
    artifact suppresses A by float noise, and so keeps B. B's own IoUs are far from 0.45."""
    a, b = [3.793, 0, 13.793, 10], [5.0, 0, 15.0, 10]
    ref, got = _with(REF, a, 0.5, 1), _with(REF, b, 0.45, 1)
    assert _check(got, ref) == {"iou_threshold": 2}
    with pytest.raises(LoweringError, match="extra label 1 score 0.45"):
        _check(_with(REF, b, 0.45, 1), REF)  # without the flip, B has no excuse


def test_two_near_equal_candidates_at_a_full_cap_may_swap() -> None:
    """keep_top_k took one of two candidates 1e-6 apart: both sides hold K rows."""
    ref = _with(REF, [300, 300, 310, 310], 0.5000010, 5)
    got = _with(REF, [400, 400, 410, 410], 0.5000005, 6)
    with pytest.raises(LoweringError, match="missing label 5"):
        _check(got, ref, BARE)
    assert _check(got, ref) == {"tie": 2}


TIED = _dets(  # a repeated patch: three candidates at one score; B and C overlap by IoU 0.59 > 0.45
    [[0.0, 0, 50, 120], [32, 32, 82, 152], [200, 200, 220, 220], [300, 300, 330, 320]], [0.39, 0.39, 0.3, 0.2],
    [2, 2, 1, 0],
)
B = [32.0, 0, 82, 120]


def test_of_two_tied_candidates_that_suppress_each_other_either_may_be_kept() -> None:
    """YOLOv5's argsort(descending=True) leaves tied scores in either order, so the NMS keeps B or C."""
    got = [t.clone() for t in TIED]
    got[0][1] = torch.tensor(B)
    with pytest.raises(LoweringError, match="missing label 2 score 0.39"):
        _check(got, TIED, BARE)
    assert _check(got, TIED) == {"tie": 2}


def test_a_tied_candidate_that_would_not_suppress_is_not_a_tie() -> None:
    got = [t.clone() for t in TIED]
    got[0][1] = torch.tensor([32.0, 80, 82, 200])  # IoU 0.25 with C: both would have been kept
    with pytest.raises(LoweringError, match="missing label 2 score 0.39"):
        _check(got, TIED)


def test_a_box_moved_at_a_score_eager_shows_once_is_not_a_tie() -> None:
    got = [t.clone() for t in TIED]
    got[0][2] = torch.tensor([205.0, 200, 225, 220])  # IoU 0.6 with the original; 0.3 unshared, not the last
    with pytest.raises(LoweringError, match="missing label 1 score 0.3"):
        _check(got, TIED)


def test_a_different_last_row_is_not_a_tie() -> None:
    ref = _with(REF, [300, 300, 310, 310], 0.5, 5)
    with pytest.raises(LoweringError, match="missing label 5"):
        _check(_with(REF, [400, 400, 410, 410], 0.45, 6), ref)


def test_rows_of_near_equal_scores_may_swap_and_others_may_not() -> None:
    ref = _dets([[0, 0, 10, 10], [40, 40, 60, 60], [100, 100, 130, 120]], [0.9, 0.7000001, 0.7], [1, 2, 1])
    swapped = [t[[0, 2, 1]] for t in ref]
    assert _check(swapped, ref) == {"tie": 1}
    with pytest.raises(LoweringError, match="rows 0 and 1 come in the other order"):
        _check([t[[1, 0, 2]] for t in ref], ref)


def test_a_shifted_box_fails() -> None:
    got = [t.clone() for t in REF]
    got[0][2] += torch.tensor([2.0, 0, 2.0, 0])
    with pytest.raises(LoweringError, match="row 2: missing label 1 score 0.7"):
        _check(got, REF)


def test_a_keypoint_one_anchor_off_fails() -> None:
    keypoints = torch.rand(4, 17, 3, generator=torch.Generator().manual_seed(0)) * 100
    ref = [*REF, keypoints]
    got = [*REF, keypoints.clone()]
    got[3][1] = keypoints[2]  # the next anchor's keypoints
    with pytest.raises(LoweringError, match="row 1: output #3 differs"):
        _check(got, ref)


def _blob(top: int) -> torch.Tensor:
    mask = torch.zeros(64, 64, dtype=torch.bool)
    mask[top : top + 40, 10:50] = True
    return mask


def test_masks_pair_by_iou_a_few_flipped_pixels_are_noise() -> None:
    masks = torch.stack([_blob(5)] * 4)
    noisy = masks.clone()
    noisy[0, 5, 10:13] = False  # three pixels at the threshold
    assert _check([*REF, noisy], [*REF, masks]) == {"mask_iou": 1}


def test_a_mask_shifted_by_a_row_fails() -> None:
    masks = torch.stack([_blob(5)] * 4)
    shifted = masks.clone()
    shifted[2] = _blob(6)
    with pytest.raises(LoweringError, match=r"row 2: output #3 overlaps eager's by IoU 0\.95"):
        _check([*REF, shifted], [*REF, masks])


def test_a_row_moved_past_a_lower_score_fails_even_beside_a_tie() -> None:
    """Rows 0 and 1 tie; row 0 coming after row 2 (0.5) is no tie, though no two neighbours swap."""
    ref = _dets([[0, 0, 10, 10], [40, 40, 60, 60], [100, 100, 130, 120]], [0.9, 0.9, 0.5], [1, 2, 1])
    with pytest.raises(LoweringError, match="rows 0 and 2 come in the other order"):
        _check([t[[1, 2, 0]] for t in ref], ref)


def test_selected_rows_keep_eagers_order() -> None:
    """A selection (x[scores > t]) keeps its input's order: any other order fails where eager's rows
    are not by score, and near-equal scores may swap where they are."""
    selected = RowsSpec(0, "selected", score_thresholds=(0.25,))
    ref = _dets([[0, 0, 10, 10], [40, 40, 60, 60], [100, 100, 130, 120]], [0.5, 0.9, 0.7], [1, 2, 1])
    with pytest.raises(LoweringError, match="rows 0 and 1 come in the other order"):
        _check([t[[1, 0, 2]] for t in ref], ref, selected)
    ranked = _dets([[0, 0, 10, 10], [40, 40, 60, 60], [100, 100, 130, 120]], [0.9, 0.9000001, 0.7], [1, 2, 1])
    assert _check([t[[1, 0, 2]] for t in ranked], ranked, selected) == {"tie": 1}
