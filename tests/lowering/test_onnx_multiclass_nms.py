"""ONNX translations of fxdeploy::multiclass_nms: graph shape, validity, and numerics on runtimes.

Each lowering test asserts the three things the onnxscript rewriter's tests do: the op types in
the graph, onnx.checker, and numerics on ONNX Runtime against the reference kernel.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
import onnx
import pytest
import torch

import fxdeploy
import fxdeploy.ops as ops
from fxdeploy.lowering.onnx_translations import translation_table
from tests.detections import assert_detections_match, padding_problems
from tests.helpers import require_target
from tests.lowering.onnx_helpers import (
    OUTPUT_NAMES,
    MulticlassNMS,
    cached_model,
    example_inputs,
    export_multiclass_nms,
    op_histogram,
    openvino_model,
    ort_session,
    reference,
    run_openvino,
    run_ort,
)

# id: (num_classes, per-class boxes, keyword arguments)
VARIANTS: dict[str, tuple[int, bool, dict[str, Any]]] = {
    "shared_boxes": (4, False, {"keep_top_k": 12}),
    "per_class_boxes": (3, True, {"keep_top_k": 10, "max_output_boxes_per_class": 3}),
    "agnostic": (4, False, {"keep_top_k": 9, "class_agnostic": True}),
    "pre_top_k_background": (4, False, {"keep_top_k": 10, "pre_top_k": 12, "background_label_id": 2}),
}
PRE_TOP_K_2 = {"pre_top_k": 2, "keep_top_k": 4, "score_threshold": float("-inf")}
# Ops that TensorRT's parser or OpenVINO handle poorly, or that make shapes data-dependent.
UNWANTED = {"Loop", "If", "Scan", "Unique", "NonZero", "ScatterND", "SequenceConstruct"}


def realistic(batch: int, num_boxes: int, num_classes: int, per_class: bool, seed: int) -> tuple[torch.Tensor, ...]:
    """Boxes clustered like a detector's output (many near-duplicates) and sigmoid scores."""
    generator = torch.Generator().manual_seed(seed)
    lead = (batch, num_boxes, num_classes) if per_class else (batch, num_boxes)
    objects = torch.rand(batch, 6, 2, generator=generator) * 80
    pick = torch.randint(0, 6, lead, generator=generator)
    centre = torch.gather(objects, 1, pick.reshape(batch, -1, 1).expand(-1, -1, 2)).reshape(*lead, 2)
    centre = centre + torch.randn(*lead, 2, generator=generator) * 3
    half = 8 + torch.rand(*lead, 2, generator=generator) * 8
    scores = torch.sigmoid(torch.randn(batch, num_boxes, num_classes, generator=generator) * 2 - 2)
    return torch.cat([centre - half, centre + half], -1), scores


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_standard_graph_is_valid_and_uses_one_nonmaxsuppression(variant: str) -> None:
    num_classes, per_class, kwargs = VARIANTS[variant]
    model = cached_model(num_classes, per_class_boxes=per_class, **kwargs)
    onnx.checker.check_model(model, full_check=True)
    histogram = op_histogram(model)
    assert histogram["NonMaxSuppression"] == 1
    assert not UNWANTED & set(histogram), histogram
    assert {node.domain for node in model.graph.node} <= {""}
    keep = kwargs["keep_top_k"]
    shapes = {o.name: [d.dim_value or d.dim_param for d in o.type.tensor_type.shape.dim] for o in model.graph.output}
    batch = shapes["num_dets"][0]
    assert isinstance(batch, str)  # the batch dim stays symbolic
    assert shapes == {
        "det_boxes": [batch, keep, 4],
        "det_scores": [batch, keep],
        "det_labels": [batch, keep],
        "num_dets": [batch],
        "det_index": [batch, keep],
    }
    dtypes = [o.type.tensor_type.elem_type for o in model.graph.output]
    assert dtypes == [onnx.TensorProto.FLOAT] * 2 + [onnx.TensorProto.INT64] * 3


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize(("batch", "num_boxes"), [(1, 300), (3, 120)])
def test_onnxruntime_matches_reference_on_detector_like_inputs(variant: str, batch: int, num_boxes: int) -> None:
    num_classes, per_class, kwargs = VARIANTS[variant]
    session = ort_session(cached_model(num_classes, per_class_boxes=per_class, **kwargs))
    boxes, scores = realistic(batch, num_boxes, num_classes, per_class, seed=batch * 1000 + num_boxes)
    want, got = reference(boxes, scores, **kwargs), run_ort(session, boxes, scores)
    assert padding_problems(got) == []
    assert min(want[3].tolist()) > 0  # the inputs exercise real detections
    assert_detections_match(want, got)
    assert all(torch.equal(w, g) for w, g in zip(want, got, strict=True))  # tie-free inputs


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64])
def test_other_float_dtypes_round_trip(dtype: torch.dtype) -> None:
    model = export_multiclass_nms(3, dtype=dtype, keep_top_k=10)
    onnx.checker.check_model(model, full_check=True)
    boxes, scores = (t.to(dtype) for t in example_inputs(2, 40, 3))
    got = run_ort(ort_session(model), boxes, scores)
    assert [t.dtype for t in got] == [dtype, dtype, torch.int64, torch.int64, torch.int64]
    assert_detections_match(reference(boxes, scores, keep_top_k=10), got, score_atol=1e-3)


def test_openvino_matches_reference_on_detector_like_inputs() -> None:
    num_classes, per_class, kwargs = VARIANTS["shared_boxes"]
    compiled = openvino_model(cached_model(num_classes, per_class_boxes=per_class, **kwargs))
    boxes, scores = realistic(2, 300, num_classes, per_class, seed=7)
    got = run_openvino(compiled, boxes, scores)
    assert padding_problems(got) == []
    assert_detections_match(reference(boxes, scores, **kwargs), got)


@pytest.mark.parametrize("iou_threshold", [0.5, 0.25])
def test_openvino_flavour_keeps_a_box_whose_iou_equals_the_threshold(iou_threshold: float) -> None:
    """OpenVINO suppresses at IoU == t; the openvino flavour's one-ulp nudge restores the contract."""
    kwargs = dict(iou_threshold=iou_threshold, score_threshold=0.0, max_output_boxes_per_class=3, keep_top_k=64)
    height = 1.0 / iou_threshold  # box 2 contains box 1: IoU = 1 / height, exactly t in float32
    boxes = torch.tensor([[[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, height]]])
    scores = torch.tensor([[[0.9], [0.8]]])
    assert reference(boxes, scores, **kwargs)[3].tolist() == [2]
    assert run_ort(ort_session(cached_model(1, **kwargs)), boxes, scores)[3].tolist() == [2]
    standard = run_openvino(openvino_model(cached_model(1, **kwargs)), boxes, scores)
    assert standard[3].tolist() == [1]  # the runtime difference this flavour exists for
    nudged = run_openvino(openvino_model(cached_model(1, flavour="openvino", **kwargs)), boxes, scores)
    assert all(torch.equal(w, g) for w, g in zip(reference(boxes, scores, **kwargs), nudged, strict=True))


def test_iou_threshold_zero_keeps_disjoint_boxes_on_every_runtime() -> None:
    model = cached_model(1, iou_threshold=0.0, keep_top_k=4)
    boxes = torch.tensor([[[0.0, 0.0, 1.0, 1.0], [2.0, 2.0, 3.0, 3.0], [0.5, 0.5, 1.5, 1.5]]])
    scores = torch.tensor([[[0.9], [0.8], [0.7]]])
    want = reference(boxes, scores, iou_threshold=0.0, keep_top_k=4)
    assert want[3].tolist() == [2]
    for got in (
        run_ort(ort_session(model), boxes, scores),
        run_openvino(openvino_model(model), boxes, scores),
    ):
        assert all(torch.equal(w, g) for w, g in zip(want, got, strict=True))


def test_translation_table() -> None:
    fxdeploy_ops = torch.ops.fxdeploy
    expected = {fxdeploy_ops.multiclass_nms.default, fxdeploy_ops.nms.default, fxdeploy_ops.batched_nms.default}
    softmax = {torch.ops.aten._softmax.default, torch.ops.aten.softmax.int}
    everywhere = {torch.ops.aten.softmax.int, torch.ops.aten.log_softmax.int, torch.ops.aten.log_sigmoid.default,
                  torch.ops.aten.hypot.default, torch.ops.aten.sort.stable,
                  torch.ops.aten.roll.default}  # a shift read from a size (roll.py)
    aten = torch.ops.aten
    shifts = {aten.__lshift__.Scalar, aten.__lshift__.Tensor, aten.bitwise_left_shift.Tensor,
              aten.bitwise_left_shift.Tensor_Scalar, aten.__rshift__.Scalar, aten.__rshift__.Tensor,
              aten.bitwise_right_shift.Tensor, aten.bitwise_right_shift.Tensor_Scalar}
    exact = {aten.atan2.default, aten.angle.default, aten.histc.default,  # torch's signed zeros and bins
             aten.fmax.default, aten.fmin.default,  # torch's NaN rule
             aten.floor_divide.default, aten.floor_divide.Scalar, aten.div.Tensor_mode, aten.div.Scalar_mode,
             aten.remainder.Tensor, aten.remainder.Scalar,  # torch's floor of the exact quotient
             operator.floordiv}  # a size's //: Python's floor, where ONNX's integer Div truncates
    greater = {aten.gt.Tensor, aten.gt.Scalar, aten.ge.Tensor, aten.ge.Scalar,  # OpenVINO's Greater beside a NaN
               aten.fmod.Tensor, aten.fmod.Scalar}  # and its integer Mod, float32's (exact_integers.py)
    assert set(translation_table("standard")) == expected | softmax | everywhere | shifts | exact
    for flavour in ("tensorrt", "efficient_nms_trt"):  # TensorRT's TopK promises no order among ties
        table = translation_table(flavour)
        assert set(table) == expected | softmax | {aten.topk.default, aten.sort.default} | everywhere | shifts | exact
        assert table[aten.topk.default].__name__ == "topk_any_tie_order"
        assert table[aten.sort.stable].__name__ == "sort_stable_any_tie_order"
        assert table[aten.sort.default].__name__ == "sort_any_tie_order"
    assert set(translation_table("openvino")) == expected | {aten.topk.default} | everywhere | shifts | exact | greater
    assert translation_table("openvino")[aten.remainder.Tensor].__name__ == "remainder_openvino"  # its Mod: no fmod
    assert translation_table("openvino")[aten.fmod.Tensor].__name__ == "fmod_openvino"
    known = r"\['standard', 'openvino', 'tensorrt', 'efficient_nms_trt'\]"
    with pytest.raises(ValueError, match=r"unknown flavour 'ncnn'; known: " + known):
        translation_table("ncnn")


def test_no_candidates_and_empty_inputs_give_padding_on_onnxruntime() -> None:
    num_classes, per_class, kwargs = VARIANTS["pre_top_k_background"]
    session = ort_session(cached_model(num_classes, per_class_boxes=per_class, **kwargs))
    for num_boxes in (0, 5):
        boxes, scores = example_inputs(2, num_boxes, num_classes)
        got = run_ort(session, boxes, scores * 0.01)
        assert got[3].tolist() == [0, 0] and padding_problems(got) == []
        assert all(torch.equal(w, g) for w, g in zip(reference(boxes, scores * 0.01, **kwargs), got, strict=True))
    assert np.array_equal(got[2].numpy(), np.full((2, kwargs["keep_top_k"]), -1))
    assert ops.multiclass_nms(boxes, scores * 0.01, **kwargs)[3].tolist() == [0, 0]


def test_pre_top_k_keeps_the_lower_box_index_tie_rule() -> None:
    """pre_top_k gathers boxes by rank; NMS must still see them in box order to break ties."""
    model = cached_model(2, **PRE_TOP_K_2)
    boxes = torch.tensor([[[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0], [5.0, 5.0, 6.0, 6.0]]])
    scores = torch.tensor([[[0.5, 0.1], [0.5, 0.9], [0.2, 0.2]]])  # box 1 ranks first, ties box 0
    want = reference(boxes, scores, **PRE_TOP_K_2)
    assert want[4][0, : int(want[3][0])].tolist() == [1, 0]  # class 1 keeps box 1, class 0 box 0
    got = run_ort(ort_session(model), boxes, scores)
    assert all(torch.equal(w, g) for w, g in zip(want, got, strict=True))


def test_nan_scores_neither_rank_in_pre_top_k_nor_get_selected() -> None:
    """ONNX Runtime's ReduceMax and TopK let NaN win; the graph must rank NaN as -inf."""
    model = cached_model(2, **PRE_TOP_K_2)
    boxes = torch.tensor([[[0.0, 0.0, 1.0, 1.0], [2.0, 2.0, 3.0, 3.0], [4.0, 4.0, 5.0, 5.0]]])
    nan = float("nan")
    scores = torch.tensor([[[nan, 0.1], [0.5, nan], [0.3, 0.2]]])
    want = reference(boxes, scores, **PRE_TOP_K_2)
    assert want[4][0, : int(want[3][0])].tolist() == [1, 2, 2]  # box 0 (max 0.1) is ranked out
    got = run_ort(ort_session(model), boxes, scores)
    assert all(torch.equal(w, g) for w, g in zip(want, got, strict=True))


@pytest.mark.parametrize("per_class_boxes", [False, True], ids=["shared_boxes", "per_class_boxes"])
def test_static_sizes_rank_and_merge_ties_without_a_stable_sort(per_class_boxes: bool) -> None:
    """Where B and N are static (a per-image detector after padding), the ranks and the merge's
    top K each come from two TopKs whose result does not depend on how they order ties, and
    OpenVINO's executor leaves exactly those four unstable (its stable TopK costs tens of times
    more). Thousands of boxes in chains that overlap, with scores on four levels: which box of
    each pair survives, and the order of the K rows, rest on the tie order alone."""
    from fxdeploy.artifact.onnx_files import TIE_FREE
    from fxdeploy.runtime.openvino import read_model

    ov = pytest.importorskip("openvino", reason="the OpenVINO runtime is not installed (pip install openvino)")
    n, classes = 3000, 2
    kwargs = dict(iou_threshold=0.3, score_threshold=0.05, keep_top_k=4000, max_output_boxes_per_class=4000)
    generator = torch.Generator().manual_seed(1)
    starts = (torch.arange(n, dtype=torch.float32) * 4).expand(2, n)
    lead = (2, n, classes) if per_class_boxes else (2, n)
    boxes = torch.stack([starts, torch.zeros(2, n), starts + 10, torch.full((2, n), 10.0)], -1)
    boxes = boxes[:, torch.randperm(n, generator=generator)]  # tied boxes in no box order
    if per_class_boxes:
        boxes = boxes[:, :, None].expand(*lead, 4).contiguous()
    scores = torch.randint(0, 4, (2, n, classes), generator=generator) * 0.25 + 0.05  # 0.05: no candidate
    want = reference(boxes, scores, **kwargs)
    assert all(1000 < int(c) < 4000 for c in want[3]), want[3]
    for flavour in ("standard", "openvino"):
        model = cached_model(classes, per_class_boxes=per_class_boxes, flavour=flavour, static_boxes=n, **kwargs)
        topk = [node for node in model.graph.node if node.op_type == "TopK"]
        assert sum(any(o.startswith(TIE_FREE) for o in node.output) for node in topk) == 4
        got = run_ort(ort_session(model), boxes, scores) if flavour == "standard" else None
        if flavour == "openvino":
            stable = [op.get_attributes()["stable"] for op in read_model(ov.Core(), model.SerializeToString()).get_ops()
                      if op.get_type_name() == "TopK"]
            assert sorted(stable) == [False] * 4 + [True] * (len(topk) - 4)
            got = run_openvino(openvino_model(model), boxes, scores)
        for name, w, g in zip(("boxes", "scores", "labels", "num_dets", "index"), want, got, strict=True):
            assert torch.equal(w, g), f"{flavour}: {name} differ"


def test_overlapping_boxes_with_equal_scores_keep_the_lower_index_on_every_runtime() -> None:
    """Chains of overlapping boxes whose scores tie exactly: the contract visits the lower box
    first, so which box of each overlapping pair survives depends on the order alone."""
    kwargs = dict(iou_threshold=0.3, score_threshold=0.05, keep_top_k=64, max_output_boxes_per_class=64)
    starts = torch.arange(60, dtype=torch.float32) * 4  # each box overlaps its neighbours (IoU 0.43)
    boxes = torch.stack([starts, torch.zeros(60), starts + 10, torch.full((60,), 10.0)], -1)[None]
    boxes = boxes[:, torch.randperm(60, generator=torch.Generator().manual_seed(0))]  # ties in no box order
    scores = torch.full((1, 60, 1), 0.75)
    scores[0, ::7] = 0.5  # a second tied level
    want = reference(boxes, scores, **kwargs)
    kept = want[4][0, : int(want[3][0])]
    assert 10 < len(kept) < 50
    model = cached_model(1, **kwargs)
    for got in (run_ort(ort_session(model), boxes, scores), run_openvino(openvino_model(model), boxes, scores)):
        assert all(torch.equal(w, g) for w, g in zip(want, got, strict=True))


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_a_bounded_dynamic_batch_merges_ties_without_a_stable_sort(target: str, tmp_path: Any) -> None:
    """A batched detector's batch is dynamic but bounded (its dynamic_shapes maximum): lowering
    bounds the merge's row length from it, so the merge's TopK is tie-free as at a static batch
    (OpenVINO's stable TopK cost YOLO11n 12 ms at batch 8), with every output still the
    reference's at batch 3 over thousands of tied, overlapping boxes."""
    from fxdeploy.artifact.onnx_files import TIE_FREE
    require_target(target)
    n, classes = 3000, 2
    kwargs = dict(iou_threshold=0.3, score_threshold=0.05, keep_top_k=400, max_output_boxes_per_class=200)
    generator = torch.Generator().manual_seed(2)
    starts = (torch.arange(n, dtype=torch.float32) * 4).expand(3, n)
    boxes = torch.stack([starts, torch.zeros(3, n), starts + 10, torch.full((3, n), 10.0)], -1)
    boxes = boxes[:, torch.randperm(n, generator=generator)].contiguous()
    scores = torch.randint(0, 4, (3, n, classes), generator=generator) * 0.25 + 0.05
    deployed = fxdeploy.lower(MulticlassNMS(**kwargs), (boxes[:2], scores[:2]), target=target,
                              dynamic_shapes={"boxes": {0: ("batch", 1, 4)}, "scores": {0: ("batch", 1, 4)}})
    graph = onnx.load(str(deployed.save(tmp_path / target) / "model.onnx")).graph
    topk = [node for node in graph.node if node.op_type == "TopK"]
    assert sum(any(o.startswith(TIE_FREE) for o in node.output) for node in topk) == 4, len(topk)
    want = reference(boxes, scores, **kwargs)
    assert all(300 < int(c) <= 400 for c in want[3]), want[3]
    got = deployed(boxes, scores)
    for name, w, g in zip(OUTPUT_NAMES, want, got, strict=True):
        assert torch.equal(w, g), f"{name} differ"
