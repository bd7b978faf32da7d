"""multiclass_nms with iou_threshold >= 1: nothing is suppressed, so the graph has no NonMaxSuppression.

The property tests (tests/ops/test_properties.py, configs ``iou_one*``) check these graphs against
the reference on random inputs; here: which graph is chosen, and the cases those rarely draw
(identical boxes on OpenVINO, a static class-agnostic model, all-padding outputs).
"""

from __future__ import annotations

from typing import Any

import onnx
import pytest
import torch

from fxdeploy.lowering.onnx_translations import translation_table
from tests.lowering.onnx_helpers import (
    OUTPUT_NAMES,
    MulticlassNMS,
    cached_model,
    op_histogram,
    openvino_model,
    ort_session,
    reference,
    run_openvino,
    run_ort,
)

FIELDS = ("boxes", "scores", "labels", "num_dets", "index")


def _assert_equal(want: Any, got: Any) -> None:
    for field, w, g in zip(FIELDS, want, got, strict=True):
        assert torch.equal(w, g), f"{field} differs\nwant {w}\ngot  {g}"


def _static_model(boxes: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> onnx.ModelProto:
    """Exported at the inputs' own (static) shapes, as fxdeploy lowers a model without dynamic dims."""
    ep = torch.export.export(MulticlassNMS(**kwargs), (boxes, scores), strict=True)
    program = torch.onnx.export(
        ep, (boxes, scores), dynamo=True, input_names=["boxes", "scores"], output_names=OUTPUT_NAMES,
        custom_translation_table=translation_table("standard"), optimize=True, verbose=False,
    )
    model = program.model_proto
    model.ir_version = 10
    return model


def _tied_grid(batch: int, num_boxes: int, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Boxes on a coarse grid (many identical ones) and scores from a few levels (many ties)."""
    generator = torch.Generator().manual_seed(0)
    corners = torch.randint(0, 3, (batch, num_boxes, 2), generator=generator).float()
    boxes = torch.cat([corners, corners + 2], -1)
    levels = torch.tensor([0.0, 0.2, 0.6, 0.9])
    return boxes, levels[torch.randint(0, 4, (batch, num_boxes, num_classes), generator=generator)]


@pytest.mark.parametrize(
    ("kwargs", "has_nms"),
    [
        (dict(iou_threshold=1.0, max_output_boxes_per_class=10, keep_top_k=10), False),
        (dict(iou_threshold=1.0, max_output_boxes_per_class=10, keep_top_k=10, pre_top_k=5,
              background_label_id=0), False),
        (dict(iou_threshold=0.99, max_output_boxes_per_class=10, keep_top_k=10), True),
        (dict(iou_threshold=1.0, max_output_boxes_per_class=10, keep_top_k=10, num_classes=1), False),
        # the cap may bind: per class below keep_top_k with N unknown, or a class-agnostic group
        (dict(iou_threshold=1.0, max_output_boxes_per_class=3, keep_top_k=10), True),
        (dict(iou_threshold=1.0, max_output_boxes_per_class=10, keep_top_k=10, class_agnostic=True), True),
    ],
)
def test_nonmaxsuppression_only_where_it_can_suppress(kwargs: dict[str, Any], has_nms: bool) -> None:
    kwargs = dict(kwargs)
    classes = kwargs.pop("num_classes", 3)
    ops = op_histogram(cached_model(classes, **kwargs))
    assert ("NonMaxSuppression" in ops) is has_nms, ops
    assert ops["TopK"] >= 1
    if classes == 1 and not has_nms:  # one class: the pair index is the box index
        assert "Div" not in ops and "Mod" not in ops, ops


def test_static_class_agnostic_cap_covering_every_pair_needs_no_nms() -> None:
    boxes, scores = _tied_grid(2, 8, 3)
    covering = dict(iou_threshold=1.0, score_threshold=0.1, max_output_boxes_per_class=24, keep_top_k=6,
                    class_agnostic=True)
    model = _static_model(boxes, scores, **covering)
    assert "NonMaxSuppression" not in op_histogram(model)
    _assert_equal(reference(boxes, scores, **covering), run_ort(ort_session(model), boxes, scores))
    binding = dict(covering, max_output_boxes_per_class=23)
    assert "NonMaxSuppression" in op_histogram(_static_model(boxes, scores, **binding))


@pytest.mark.parametrize("per_class", [False, True])
def test_ties_and_identical_boxes_match_the_reference_exactly(per_class: bool) -> None:
    boxes, scores = _tied_grid(3, 12, 3)
    if per_class:
        boxes = boxes.unsqueeze(2).expand(-1, -1, 3, -1).contiguous()
    kwargs = dict(iou_threshold=1.0, score_threshold=0.1, max_output_boxes_per_class=20, keep_top_k=15)
    model = cached_model(3, per_class_boxes=per_class, **kwargs)
    want = reference(boxes, scores, **kwargs)
    assert int(want[3].min()) > 0  # there is something to rank
    _assert_equal(want, run_ort(ort_session(model), boxes, scores))


@pytest.mark.filterwarnings("ignore::DeprecationWarning:openvino")
@pytest.mark.parametrize("per_class", [False, True])
def test_openvino_breaks_ties_by_the_lower_index(per_class: bool) -> None:
    """OpenVINO's ONNX frontend makes TopK unstable; fxdeploy's reader restores ONNX's tie rule.
    Equal scores everywhere (a keep mask used as scores) must come out in class, then box order."""
    boxes, scores = _tied_grid(2, 24, 2)
    scores = (scores > 0.5).float()
    if per_class:
        boxes = boxes.unsqueeze(2).expand(-1, -1, 2, -1).contiguous()
    kwargs = dict(iou_threshold=1.0, score_threshold=0.5, max_output_boxes_per_class=48, keep_top_k=48)
    want = reference(boxes, scores, **kwargs)
    assert int(want[3].min()) > 10  # many tied rows
    compiled = openvino_model(cached_model(2, per_class_boxes=per_class, **kwargs))
    _assert_equal(want, run_openvino(compiled, boxes, scores))


@pytest.mark.filterwarnings("ignore::DeprecationWarning:openvino")
def test_openvino_keeps_identical_boxes_at_iou_one() -> None:
    """OpenVINO's NonMaxSuppression suppresses at IoU >= t, so at t = 1 it dropped identical boxes;
    without the node, its result is the contract's."""
    boxes = torch.tensor([[[0.0, 0.0, 4.0, 4.0]] * 4 + [[1.0, 1.0, 5.0, 5.0]] * 2])
    scores = torch.tensor([[[0.9, 0.1], [0.8, 0.2], [0.7, 0.35], [0.6, 0.4], [0.5, 0.45], [0.3, 0.55]]])
    kwargs = dict(iou_threshold=1.0, score_threshold=0.15, max_output_boxes_per_class=12, keep_top_k=12)
    want = reference(boxes, scores, **kwargs)
    assert int(want[3][0]) == 11
    _assert_equal(want, run_openvino(openvino_model(cached_model(2, **kwargs)), boxes, scores))


def test_no_candidates_and_no_boxes_give_all_padding() -> None:
    kwargs = dict(iou_threshold=1.0, score_threshold=0.5, max_output_boxes_per_class=8, keep_top_k=8,
                  pre_top_k=3)
    session = ort_session(cached_model(2, **kwargs))
    for num_boxes in (0, 5):
        boxes, scores = torch.rand(2, num_boxes, 4), torch.full((2, num_boxes, 2), 0.25)
        got = run_ort(session, boxes, scores)
        _assert_equal(reference(boxes, scores, **kwargs), got)
        assert got[3].tolist() == [0, 0] and got[2].eq(-1).all()


@pytest.mark.filterwarnings("ignore::DeprecationWarning:openvino")
@pytest.mark.parametrize("num_classes", [1, 3])
def test_static_pairs_covering_k_rank_without_spare_columns(num_classes: int) -> None:
    """Static N * C >= K: TopK ranks the pairs themselves, with no -inf spare columns concatenated
    (the one Concat left appends the padding rows' zero box)."""
    boxes, scores = _tied_grid(2, 10, num_classes)
    kwargs = dict(iou_threshold=1.0, score_threshold=0.1, max_output_boxes_per_class=10, keep_top_k=10)
    model = _static_model(boxes, scores, **kwargs)
    ops = op_histogram(model)
    assert "NonMaxSuppression" not in ops and ops["Concat"] == 1, ops
    want = reference(boxes, scores, **kwargs)
    assert 0 < int(want[3].min()) and int(want[3].max()) <= 10
    _assert_equal(want, run_ort(ort_session(model), boxes, scores))
    _assert_equal(want, run_openvino(openvino_model(model), boxes, scores))
    few = dict(kwargs, score_threshold=0.8)  # most rows padding
    session = ort_session(_static_model(boxes, scores, **few))
    _assert_equal(reference(boxes, scores, **few), run_ort(session, boxes, scores))
