"""Parity checks of the zoo: tensors by max abs error, detections as detections, in eager's order."""

from __future__ import annotations

from typing import Any

import torch

from tests.detections import assert_same_detections
from tests.helpers import max_abs_error


def check_classifier(want: Any, got: Any, tolerance: float) -> float:
    """Same output structure (the HF dataclass) and every tensor within ``tolerance``."""
    assert type(got) is type(want), f"deployed returns {type(got).__name__}, eager {type(want).__name__}"
    error = max_abs_error(got.to_tuple(), want.to_tuple())
    assert error <= tolerance, f"max abs error {error:.3g} > {tolerance:g}"
    return error


def check_detections(want: list[dict[str, torch.Tensor]], got: Any, tolerance: float) -> int:
    """Eager's structure (a list of per-image dicts, same keys in the same order, same dtypes), the
    same detections paired by label and IoU, and eager's order; returns the number matched (an
    image may have none, so callers check that their inputs produced some)."""
    assert isinstance(got, list) and len(got) == len(want), f"got {type(got).__name__}, expected {len(want)} images"
    for w, g in zip(want, got, strict=True):
        assert list(g) == list(w), f"keys {list(g)}, eager {list(w)}"
        assert [v.dtype for v in g.values()] == [v.dtype for v in w.values()]
    counts = [len(w["scores"]) for w in want]
    matched = sum(m.matched for m in assert_same_detections(want, got, iou=0.99, score_atol=tolerance))
    assert matched == sum(counts)
    for image, (w, g) in enumerate(zip(want, got, strict=True)):
        assert_same_order(w, g, tolerance, image)
    return matched


def assert_same_order(
    want: dict[str, torch.Tensor], got: dict[str, torch.Tensor], tolerance: float, image: int
) -> None:
    """Row k of the deployed result is eager's row k, unless eager's score there ties another
    row's within ``tolerance`` (runtimes may then order them either way; docs/nms-spec.md)."""
    scores = want["scores"]
    scale = max(1.0, float(want["boxes"].abs().max())) if len(scores) else 1.0
    for k in range(len(scores)):
        same = bool(want["labels"][k] == got["labels"][k]) and bool(
            (want["boxes"][k] - got["boxes"][k]).abs().max() <= tolerance * scale
        )
        if same:
            continue
        ties = (scores - scores[k]).abs() <= tolerance
        assert int(ties.sum()) > 1, (
            f"image {image} row {k}: eager has label {int(want['labels'][k])} box {want['boxes'][k].tolist()}, "
            f"deployed label {int(got['labels'][k])} box {got['boxes'][k].tolist()} (order differs, no tie)"
        )

