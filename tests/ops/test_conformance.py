"""ONNX's own NonMaxSuppression backend cases, an independent conformance suite.

The cases are read at test time from the installed onnx package. Each gives boxes, scores in
ONNX's [B, C, N] layout, max_output_boxes_per_class, iou_threshold, score_threshold and the
selected (batch, class, box) triples. With pre_top_k off and keep_top_k large enough, the kept set
of multiclass_nms must equal that selection, for the reference kernel and for the ONNX Runtime
lowering alike.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass

import numpy as np
import onnx
import pytest
import torch

import fxdeploy.ops as ops
from tests.detections import padding_problems
from tests.lowering.onnx_helpers import cached_model, ort_session, run_ort

KEEP_TOP_K = 64


@dataclass(frozen=True)
class Case:
    name: str
    boxes: torch.Tensor  # [B, N, 4] corners
    scores: torch.Tensor  # [B, N, C]
    max_output_boxes_per_class: int
    iou_threshold: float
    score_threshold: float
    expected: frozenset[tuple[int, int, int]]


def _corners(center_boxes: np.ndarray) -> np.ndarray:
    """center_point_box=1 gives [x_center, y_center, width, height]; the spec takes corners."""
    centre, half = center_boxes[..., :2], center_boxes[..., 2:] / 2
    return np.concatenate([centre - half, centre + half], axis=-1)


@functools.cache
def onnx_cases() -> tuple[Case, ...]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # other ops' case generators overflow on purpose
        testcases = collect_testcases("NonMaxSuppression")
    cases = []
    for testcase in testcases:
        (node,) = testcase.model.graph.node
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        for inputs, (selected,) in testcase.data_sets:
            boxes, scores, max_out, iou, score = inputs
            if attributes.get("center_point_box", 0) == 1:
                boxes = _corners(boxes)
            cases.append(
                Case(
                    name=testcase.name,
                    boxes=torch.from_numpy(np.ascontiguousarray(boxes, dtype=np.float32)),
                    scores=torch.from_numpy(np.ascontiguousarray(scores.transpose(0, 2, 1), dtype=np.float32)),
                    max_output_boxes_per_class=int(max_out[0]),
                    iou_threshold=float(iou[0]),
                    score_threshold=float(score[0]),
                    expected=frozenset(tuple(int(v) for v in row) for row in selected),
                )
            )
    return tuple(cases)


def test_onnx_ships_the_ten_cases() -> None:
    names = {case.name for case in onnx_cases()}
    assert len(onnx_cases()) == 10 and len(names) == 10
    assert "test_nonmaxsuppression_iou_threshold_boundary" in names
    assert "test_nonmaxsuppression_center_point_box_format" in names


def _kwargs(case: Case) -> dict[str, object]:
    return {
        "iou_threshold": case.iou_threshold,
        "score_threshold": case.score_threshold,
        "max_output_boxes_per_class": case.max_output_boxes_per_class,
        "keep_top_k": KEEP_TOP_K,
    }


def selected_triples(result: tuple[torch.Tensor, ...]) -> frozenset[tuple[int, int, int]]:
    """(batch, class, box) of every detection, as NonMaxSuppression reports them."""
    _, _, labels, num_dets, index = result
    return frozenset(
        (b, int(labels[b, k]), int(index[b, k])) for b in range(labels.shape[0]) for k in range(int(num_dets[b]))
    )


@functools.cache
def _ort_session(num_classes: int, max_out: int, iou: float, score: float) -> object:
    model = cached_model(
        num_classes,
        iou_threshold=iou,
        score_threshold=score,
        max_output_boxes_per_class=max_out,
        keep_top_k=KEEP_TOP_K,
    )
    onnx.checker.check_model(model)
    return ort_session(model)


@pytest.mark.parametrize("index", range(10), ids=lambda i: onnx_cases()[i].name.removeprefix("test_"))
def test_reference_reproduces_onnx_case(index: int) -> None:
    case = onnx_cases()[index]
    result = ops.multiclass_nms(case.boxes, case.scores, output_index=True, **_kwargs(case))
    assert selected_triples(result) == case.expected
    assert padding_problems(result) == []


@pytest.mark.parametrize("index", range(10), ids=lambda i: onnx_cases()[i].name.removeprefix("test_"))
def test_onnxruntime_lowering_reproduces_onnx_case(index: int) -> None:
    case = onnx_cases()[index]
    session = _ort_session(
        case.scores.shape[2], case.max_output_boxes_per_class, case.iou_threshold, case.score_threshold
    )
    result = run_ort(session, case.boxes, case.scores)
    assert selected_triples(result) == case.expected
    assert padding_problems(result) == []
