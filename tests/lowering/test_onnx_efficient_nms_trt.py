"""The EfficientNMS_TRT flavour. TensorRT is not installed here, so the tests check the exported
node and its attributes, and run the glue around it on onnx's reference evaluator with a Python
stand-in for the plugin that follows the plugin README's contract."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
import torch
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

from fxdeploy.ops.reference import multiclass_nms_reference
from tests.lowering.onnx_helpers import OUTPUT_NAMES, cached_model, example_inputs, op_histogram, reference

VARIANTS = [({}, False), ({"class_agnostic": True, "pre_top_k": 5, "background_label_id": 0}, True)]
IDS = ["shared_boxes", "per_class_boxes_agnostic_pre_top_k_background"]


class EfficientNMS_TRT(OpRun):  # onnx.reference matches the op type by class name
    """EfficientNMS_TRT per its README: num_detections [B, 1] int32, zero-padded boxes, scores
    and int32 classes, at most max_output_boxes per image and no per-class cap."""

    op_domain = "TRT"

    def _run(self, boxes: np.ndarray, scores: np.ndarray, **attrs: Any) -> tuple[np.ndarray, ...]:
        det_boxes, det_scores, labels, num_dets, _ = multiclass_nms_reference(
            torch.from_numpy(boxes),
            torch.from_numpy(scores),
            float(attrs["iou_threshold"]),
            float(attrs["score_threshold"]),
            scores.shape[1] * scores.shape[2],  # no per-class cap: every (box, class) pair may stay
            -1,
            int(attrs["max_output_boxes"]),
            int(attrs["background_class"]),
            bool(attrs["class_agnostic"]),
        )
        classes = labels.clamp(min=0).numpy().astype(np.int32)
        return num_dets.numpy().astype(np.int32)[:, None], det_boxes.numpy(), det_scores.numpy(), classes


@pytest.mark.parametrize(("kwargs", "per_class"), VARIANTS, ids=IDS)
def test_efficient_nms_trt_flavour_exports_the_plugin(kwargs: dict[str, Any], per_class: bool) -> None:
    """TensorRT is not installed here: check the node, its attributes and the outputs' contract."""
    model = cached_model(3, per_class_boxes=per_class, flavour="efficient_nms_trt", keep_top_k=7, **kwargs)
    onnx.checker.check_model(model, full_check=True)
    histogram = op_histogram(model)
    assert histogram["EfficientNMS_TRT"] == 1 and "NonMaxSuppression" not in histogram
    (node,) = [n for n in model.graph.node if n.op_type == "EfficientNMS_TRT"]
    assert node.domain == "TRT" and ("TRT", 1) in {(o.domain, o.version) for o in model.opset_import}
    attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attributes == {
        "score_threshold": pytest.approx(0.05),
        "iou_threshold": pytest.approx(0.5),
        "max_output_boxes": 7,
        "background_class": kwargs.get("background_label_id", -1),
        "score_activation": 0,
        "class_agnostic": int(kwargs.get("class_agnostic", False)),
        "box_coding": 0,
        "plugin_version": b"1",
    }
    outputs = {o.name: o.type.tensor_type for o in model.graph.output}
    assert list(outputs) == OUTPUT_NAMES
    assert [t.elem_type for t in outputs.values()] == [onnx.TensorProto.FLOAT] * 2 + [onnx.TensorProto.INT64] * 3
    assert [d.dim_value for d in outputs["det_boxes"].shape.dim][1:] == [7, 4]
    assert [d.dim_value for d in outputs["det_labels"].shape.dim][1:] == [7]
    assert len(outputs["num_dets"].shape.dim) == 1


@pytest.mark.parametrize(("kwargs", "per_class"), VARIANTS, ids=IDS)
def test_glue_turns_plugin_outputs_into_the_contract(kwargs: dict[str, Any], per_class: bool) -> None:
    """Casts, -1 padding, det_index recovered from the boxes, pre_top_k mapped back."""
    model = cached_model(3, per_class_boxes=per_class, flavour="efficient_nms_trt", keep_top_k=7, **kwargs)
    evaluator = ReferenceEvaluator(model, new_ops=[EfficientNMS_TRT])
    for batch, num_boxes in ((2, 12), (1, 3)):
        boxes, scores = example_inputs(batch, num_boxes, 3, per_class_boxes=per_class)
        scores[0, 0, 1] = float("nan")
        got = evaluator.run(OUTPUT_NAMES, {"boxes": boxes.numpy(), "scores": scores.numpy()})
        want = reference(boxes, scores, keep_top_k=7, max_output_boxes_per_class=3 * num_boxes, **kwargs)
        assert int(want[3].min()) > 0
        for name, w, g in zip(OUTPUT_NAMES, want, got, strict=True):
            assert np.array_equal(w.numpy(), g), f"{name}: want {w}, got {g}"
