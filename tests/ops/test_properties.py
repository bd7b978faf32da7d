"""Property tests: the reference against an independent oracle, and the runtimes against it.

- The oracle below is a plain Python loop over boxes written from docs/nms-spec.md, in float32 scalar
  arithmetic. The spec fixes every tie rule, so reference and oracle must agree *exactly*, ties
  included.
- ONNX Runtime runs the lowered ONNX: detection-aware agreement and equal num_dets on every input
  (ties, NaN, degenerate and flipped boxes); and since its NonMaxSuppression breaks ties as the
  spec does, element-wise equality too.
- OpenVINO runs the same ONNX: detection-aware agreement on tie-free inputs. (Its TopK orders
  equal scores differently and its NMS suppresses at IoU == threshold, as docs/nms-spec.md allows
  runtimes to differ on ties; see tests/lowering/test_onnx_multiclass_nms.py.)
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import fxdeploy.ops as ops
from tests.detections import assert_detections_match, padding_problems
from tests.lowering.onnx_helpers import cached_model, openvino_model, ort_session, run_openvino, run_ort

F32 = np.float32
NAN, INF = float("nan"), float("inf")
SETTINGS = settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# name: (num_classes, per-class boxes [B, N, C, 4], multiclass_nms keyword arguments)
CONFIGS: dict[str, tuple[int, bool, dict[str, Any]]] = {
    "default": (
        3,
        False,
        dict(iou_threshold=0.5, score_threshold=0.2, max_output_boxes_per_class=4, keep_top_k=6),
    ),
    "one_class_no_threshold": (
        1,
        False,
        dict(iou_threshold=0.3, score_threshold=-INF, max_output_boxes_per_class=50, keep_top_k=20),
    ),
    "agnostic": (
        3,
        False,
        dict(
            iou_threshold=0.45,
            score_threshold=0.1,
            max_output_boxes_per_class=6,
            keep_top_k=4,
            class_agnostic=True,
        ),
    ),
    "per_class_boxes": (
        2,
        True,
        dict(iou_threshold=0.5, score_threshold=0.3, max_output_boxes_per_class=3, keep_top_k=5),
    ),
    "background_pre_top_k": (
        3,
        False,
        dict(
            iou_threshold=0.6,
            score_threshold=0.05,
            max_output_boxes_per_class=3,
            keep_top_k=7,
            pre_top_k=4,
            background_label_id=0,
        ),
    ),
    "per_class_agnostic_high_threshold": (
        2,
        True,
        dict(
            iou_threshold=0.0,
            score_threshold=0.8,
            max_output_boxes_per_class=2,
            keep_top_k=3,
            class_agnostic=True,
            pre_top_k=3,
            background_label_id=1,
        ),
    ),
    "iou_one": (
        2,
        False,
        dict(iou_threshold=1.0, score_threshold=0.5, max_output_boxes_per_class=6, keep_top_k=4),
    ),
    # iou_threshold 1 with an uncapped class: the lowering ranks with one TopK, no NonMaxSuppression
    "iou_one_per_class_pre_top_k": (
        3,
        True,
        dict(
            iou_threshold=1.0, score_threshold=0.3, max_output_boxes_per_class=5, keep_top_k=5,
            pre_top_k=4, background_label_id=2,
        ),
    ),
    # ... and with one class (DETR's and YOLOS's postprocessing): no class arithmetic at all
    "iou_one_single_class": (
        1,
        False,
        dict(iou_threshold=1.0, score_threshold=0.05, max_output_boxes_per_class=8, keep_top_k=8, pre_top_k=6),
    ),
    # iou_threshold 1 where the cap may bind: the lowering keeps its NonMaxSuppression
    "iou_one_capped_agnostic": (
        2,
        False,
        dict(iou_threshold=1.0, score_threshold=0.1, max_output_boxes_per_class=2, keep_top_k=5, class_agnostic=True),
    ),
}


def _iou_exceeds(a: np.ndarray, b: np.ndarray, threshold: float) -> bool:
    ax1, ax2 = sorted((F32(a[0]), F32(a[2])))
    ay1, ay2 = sorted((F32(a[1]), F32(a[3])))
    bx1, bx2 = sorted((F32(b[0]), F32(b[2])))
    by1, by2 = sorted((F32(b[1]), F32(b[3])))
    width = max(F32(0), F32(min(ax2, bx2) - max(ax1, bx1)))
    height = max(F32(0), F32(min(ay2, by2) - max(ay1, by1)))
    inter = F32(width * height)
    union = F32(F32(F32((ax2 - ax1) * (ay2 - ay1)) + F32((bx2 - bx1) * (by2 - by1))) - inter)
    return bool(union > 0 and F32(inter / union) > F32(threshold))


def oracle(boxes: np.ndarray, scores: np.ndarray, **kw: Any) -> tuple[torch.Tensor, ...]:
    """multiclass_nms, one box at a time, straight from docs/nms-spec.md."""
    batch, num_boxes, num_classes = scores.shape
    keep_top_k, background = kw["keep_top_k"], kw.get("background_label_id", -1)
    out = (np.zeros((batch, keep_top_k, 4), F32), np.zeros((batch, keep_top_k), F32))
    labels, index = np.full((batch, keep_top_k), -1), np.full((batch, keep_top_k), -1)
    num_dets = np.zeros(batch, dtype=np.int64)
    classes = [c for c in range(num_classes) if c != background]
    for b in range(batch):

        def box(n: int, c: int, b: int = b) -> np.ndarray:
            return boxes[b, n, c] if boxes.ndim == 4 else boxes[b, n]

        allowed = list(range(num_boxes))
        pre_top_k = kw.get("pre_top_k", -1)
        if 0 < pre_top_k < num_boxes:

            def best(n: int, b: int = b) -> float:
                return max([-INF] + [float(scores[b, n, c]) for c in classes if not np.isnan(scores[b, n, c])])

            allowed = sorted(allowed, key=lambda n: (-best(n), n))[:pre_top_k]
        threshold = F32(kw["score_threshold"])
        candidates = [(float(scores[b, n, c]), n, c) for n in allowed for c in classes if scores[b, n, c] > threshold]
        groups = [candidates] if kw.get("class_agnostic") else [[t for t in candidates if t[2] == c] for c in classes]
        kept: list[tuple[float, int, int]] = []
        for group in groups:
            chosen: list[tuple[float, int, int]] = []
            for t in sorted(group, key=lambda t: (-t[0], t[1], t[2])):
                if len(chosen) == kw["max_output_boxes_per_class"]:
                    break
                if not any(_iou_exceeds(box(t[1], t[2]), box(u[1], u[2]), kw["iou_threshold"]) for u in chosen):
                    chosen.append(t)
            kept += chosen
        kept.sort(key=lambda t: (-t[0], t[2], t[1]))
        for k, (score, n, c) in enumerate(kept[:keep_top_k]):
            out[0][b, k], out[1][b, k], labels[b, k], index[b, k] = box(n, c), score, c, n
        num_dets[b] = min(len(kept), keep_top_k)
    return tuple(torch.from_numpy(a) for a in (*out, labels, num_dets, index))


@st.composite
def nms_inputs(draw: Any, num_classes: int, per_class: bool, tie_free: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Grid inputs (ties, zero-area, flipped and identical boxes, NaN/inf scores) or, tie-free,
    continuous random boxes (some flipped) and distinct scores with a few NaN."""
    batch, num_boxes = draw(st.integers(1, 3)), draw(st.integers(0, 9))
    box_shape = (batch, num_boxes, num_classes, 4) if per_class else (batch, num_boxes, 4)
    score_shape = (batch, num_boxes, num_classes)
    if not tie_free:
        grid = st.sampled_from([0.0, 1.0, 2.0, 3.0, 4.0])
        levels = st.sampled_from([0.0, 0.05, 0.1, 0.3, 0.5, 0.8, 0.9, 1.0, NAN, INF, -INF])
        boxes = draw(arrays(np.float32, box_shape, elements=grid))
        scores = draw(arrays(np.float32, score_shape, elements=levels))
        return torch.from_numpy(boxes), torch.from_numpy(scores)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    corner = rng.uniform(0, 16, (*box_shape[:-1], 2))
    other = corner + rng.uniform(0.5, 8, corner.shape)
    flip = rng.random(corner.shape) < 0.2
    boxes = np.concatenate([np.where(flip, other, corner), np.where(flip, corner, other)], -1)
    scores = rng.permutation(np.linspace(0.01, 0.99, int(np.prod(score_shape)))).reshape(score_shape)
    scores[rng.random(score_shape) < 0.05] = NAN
    return torch.from_numpy(boxes.astype(np.float32)), torch.from_numpy(scores.astype(np.float32))


@st.composite
def cases(
    draw: Any, tie_free: bool | None = None, exclude: frozenset[str] = frozenset()
) -> tuple[str, torch.Tensor, torch.Tensor, bool]:
    name = draw(st.sampled_from(sorted(set(CONFIGS) - exclude)))
    num_classes, per_class, _ = CONFIGS[name]
    free = draw(st.booleans()) if tie_free is None else tie_free
    boxes, scores = draw(nms_inputs(num_classes, per_class, free))
    return name, boxes, scores, free


def reference(name: str, boxes: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return ops.multiclass_nms(boxes, scores, output_index=True, **CONFIGS[name][2])


@SETTINGS
@given(cases())
def test_reference_matches_oracle_exactly(case: tuple[str, torch.Tensor, torch.Tensor, bool]) -> None:
    name, boxes, scores, _ = case
    want = oracle(boxes.numpy(), scores.numpy(), **CONFIGS[name][2])
    got = reference(name, boxes, scores)
    for field, w, g in zip(("boxes", "scores", "labels", "num_dets", "index"), want, got, strict=True):
        assert torch.equal(w, g), f"{name}: {field} differs\nwant {w}\ngot  {g}"


@functools.cache
def _ort(name: str) -> Any:
    num_classes, per_class, kwargs = CONFIGS[name]
    return ort_session(cached_model(num_classes, per_class_boxes=per_class, **kwargs))


@functools.cache
def _openvino(name: str) -> Any:
    num_classes, per_class, kwargs = CONFIGS[name]
    return openvino_model(cached_model(num_classes, per_class_boxes=per_class, **kwargs))


@SETTINGS
@given(cases())
def test_onnxruntime_lowering_matches_reference(case: tuple[str, torch.Tensor, torch.Tensor, bool]) -> None:
    name, boxes, scores, _ = case
    want, got = reference(name, boxes, scores), run_ort(_ort(name), boxes, scores)
    assert padding_problems(got) == []
    assert_detections_match(want, got)
    # ONNX Runtime visits ties as the spec does and the graph merges them as the spec does, so
    # here, unlike on other runtimes, even tied inputs must agree element by element.
    for field, w, g in zip(("boxes", "scores", "labels", "num_dets", "index"), want, got, strict=True):
        assert torch.equal(w, g), f"{name}: {field} differs\nwant {w}\ngot  {g}"


OPENVINO_AT_IOU_ONE = frozenset({"iou_one_capped_agnostic"})
"""A class-agnostic cap that may bind keeps NonMaxSuppression at t = 1, where OpenVINO suppresses
at IoU >= t: one box's other classes (IoU 1 with itself) are dropped. A documented limit of the
openvino flavour (lowering/onnx_translations/multiclass_nms.py); ONNX Runtime runs this config."""


NAN_BESIDE_THE_BEST = (
    "agnostic",
    torch.tensor([[[12.8, 15.2, 8.2, 15.9], [2.3, 15.2, 8.5, 19.7], [5.0, 6.8, 8.0, 13.2], [13.2, 6.5, 16.0, 10.4]]]),
    torch.tensor([[[0.63, 0.46, 0.72], [float("nan"), 0.99, 0.54], [0.10, 0.19, 0.28], [0.90, 0.37, 0.01]]]),
    True,
)
"""Found by hypothesis in CI: OpenVINO's CPU Greater says NaN > threshold, and the NaN pair of the
best box won its place (label 0, score NaN) until NaN was tested apart."""


@pytest.mark.filterwarnings("ignore::DeprecationWarning:openvino")
@settings(SETTINGS, max_examples=40)
@given(cases(tie_free=True, exclude=OPENVINO_AT_IOU_ONE))
@example(NAN_BESIDE_THE_BEST)
def test_openvino_runs_the_same_onnx(case: tuple[str, torch.Tensor, torch.Tensor, bool]) -> None:
    name, boxes, scores, _ = case
    want, got = reference(name, boxes, scores), run_openvino(_openvino(name), boxes, scores)
    assert padding_problems(got) == []
    assert_detections_match(want, got)


def python_nms(boxes: np.ndarray, scores: np.ndarray, idxs: np.ndarray, threshold: float) -> list[int]:
    """torchvision's documented semantics, one box at a time: corners as given, no normalization."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    kept: list[int] = []
    for i in order:
        x1, y1, x2, y2 = (F32(v) for v in boxes[i])
        for j in kept:
            u1, v1, u2, v2 = (F32(v) for v in boxes[j])
            inter = F32(max(F32(0), F32(min(x2, u2) - max(x1, u1))) * max(F32(0), F32(min(y2, v2) - max(y1, v1))))
            union = F32(F32(F32((x2 - x1) * (y2 - y1)) + F32((u2 - u1) * (v2 - v1))) - inter)
            if idxs[i] == idxs[j] and F32(inter / union) > F32(threshold):
                break
        else:
            kept.append(i)
    return kept


@SETTINGS
@given(
    st.integers(0, 12).flatmap(
        lambda n: st.tuples(
            arrays(np.float32, (n, 4), elements=st.sampled_from([0.0, 1.0, 2.0, 3.0, 2.5])),
            arrays(np.float32, (n,), elements=st.floats(0, 1, width=32)),
            arrays(np.int64, (n,), elements=st.integers(0, 2)),
        )
    ),
    st.sampled_from([0.0, 0.3, 0.5, 0.7, 1.0]),
)
def test_nms_and_batched_nms_match_python_loop(data: tuple[np.ndarray, ...], threshold: float) -> None:
    boxes, scores, idxs = data
    with np.errstate(all="ignore"):  # 0/0 IoU of degenerate boxes is NaN, as in torchvision
        single = python_nms(boxes, scores, np.zeros_like(idxs), threshold)
        batched = python_nms(boxes, scores, idxs, threshold)
    b, s = torch.from_numpy(boxes), torch.from_numpy(scores)
    assert ops.nms(b, s, threshold).tolist() == single
    assert ops.batched_nms(b, s, torch.from_numpy(idxs), threshold).tolist() == batched
