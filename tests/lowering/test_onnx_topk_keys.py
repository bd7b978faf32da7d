"""No TopK that fxdeploy's NMS lowering writes keeps a value at its type's extreme.

ONNX Runtime's CUDA TopK pads each row with the float type's lowest finite value (the highest,
for the smallest K): up to a power of two in ``BitonicTopK`` (short rows), and in the
spare slots of ``RadixTopK``'s block sort (longer rows), whose indices it never sets. A kept value
at or below that padding (-inf, or the lowest finite value itself) can lose to it, and the TopK
returns padding: indices past the row, or unset ones. On an H100 with onnxruntime-gpu 1.31.1,
YOLO11n's batched ONNX kept 2 of eager's 2144 detections with -inf as the non-candidates' key, and
3 with the lowest finite float32; TinyYolo's came out scrambled; the same files matched eager on
the CPU provider. The graphs now rank non-candidates one float32 step above the lowest
(``fxdeploy.lowering.onnx_translations._common.LOWEST``).

No GPU is needed to hold this: each test runs the ONNX on ONNX Runtime's CPU provider with every
TopK's kept values exposed, and asserts that none is at or beyond its type's finite extreme in
the direction that breaks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import fxdeploy
from examples.detector import tiny_yolo
from tests.lowering.onnx_helpers import cached_model, reference, run_ort
from tests.lowering.test_onnx_multiclass_nms import PRE_TOP_K_2, VARIANTS, realistic

CASES: dict[str, tuple[int, bool, dict[str, Any]]] = {
    **VARIANTS,
    "pre_top_k_2_no_threshold": (3, False, PRE_TOP_K_2),
    "threshold_only": (3, False, {"iou_threshold": 1.0, "max_output_boxes_per_class": 10, "keep_top_k": 10}),
    "threshold_only_agnostic": (
        3, False, {"iou_threshold": 1.0, "max_output_boxes_per_class": 10, "keep_top_k": 10, "class_agnostic": True},
    ),
}


def kept_extremes(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, int]:
    """For each float TopK node: how many of the values it keeps are at or below the lowest finite
    value (largest first) or at or above the highest (smallest first), run on ONNX Runtime's CPU
    provider; nodes with none are left out."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    topks = [node for node in model.graph.node if node.op_type == "TopK"]
    assert topks, "the graph has no TopK"
    have = {o.name for o in model.graph.output}
    for node in topks:
        name = node.output[0]
        if name not in have:
            info = inferred.get(name) or onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
            model.graph.output.append(info)
            have.add(name)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    values = dict(zip(names, session.run(None, feeds), strict=True))
    found = {}
    for node in topks:
        kept = values[node.output[0]]
        if kept.dtype.kind != "f":
            continue
        largest = next((a.i for a in node.attribute if a.name == "largest"), 1)
        extreme = np.finfo(kept.dtype)
        bad = int((kept <= extreme.min).sum() if largest else (kept >= extreme.max).sum())
        if bad:
            found[node.name] = bad
    return found


@pytest.mark.parametrize("case", sorted(CASES))
def test_multiclass_nms_topks_keep_no_extreme_value(case: str) -> None:
    num_classes, per_class, kwargs = CASES[case]
    model = cached_model(num_classes, per_class_boxes=per_class, **kwargs)
    boxes, scores = realistic(2, 150, num_classes, per_class, seed=7)
    scores[1, 100:] = 0.0  # non-candidates in every row: with K left over, the floor is among the kept
    if per_class or kwargs.get("background_label_id", -1) >= 0:
        scores[0, :5] = float("nan")  # NaN is never a candidate either
    feeds = {"boxes": boxes.numpy(), "scores": scores.numpy()}
    assert kept_extremes(model, feeds) == {}
    want, got = reference(boxes, scores, **kwargs), run_ort(onnx_session(model), boxes, scores)
    assert int(want[3].min()) > 0
    assert all(torch.equal(w, g) for w, g in zip(want, got, strict=True))


def onnx_session(model: onnx.ModelProto) -> Any:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_a_deployed_detectors_onnx_keeps_no_extreme_value(tmp_path: Path) -> None:
    """The whole artifact, as Triton's ONNX Runtime backend would run it on a GPU: TinyYolo's
    per-image loop vectorized over a dynamic batch, with images that leave most rows empty."""
    model, (x,) = tiny_yolo()
    deployed = fxdeploy.lower(model, (x,), target="onnxruntime", dynamic_shapes={"images": {0: ("batch", 1, 8)}})
    deployed.save(tmp_path / "artifact")
    images = torch.rand(4, *x.shape[1:], generator=torch.Generator().manual_seed(3)) * 255
    images[3] = 0.0  # an image with no detection at all
    onnx_model = onnx.load(str(tmp_path / "artifact" / "model.onnx"))
    assert kept_extremes(onnx_model, {"images": images.numpy()}) == {}
    got, want = deployed(images), model(images)
    assert [len(g["boxes"]) for g in got] == [len(w["boxes"]) for w in want]
    assert sum(len(w["boxes"]) for w in want) > 40
    for g, w in zip(got, want, strict=True):
        for key in ("boxes", "scores", "labels"):
            torch.testing.assert_close(g[key], w[key], rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("largest", [True, False])
def test_a_topk_over_selected_rows_keeps_no_extreme_value(tmp_path: Path, largest: bool) -> None:
    """torchvision's per-level ``topk(min(n, k))`` after a score threshold (the padding pass's
    topk rule), with fewer survivors than k: the padding is among the kept, at a finite key."""
    from tests.passes.padding.test_topk import TopOfSelected

    model = TopOfSelected(largest)
    x = torch.rand(40, generator=torch.Generator().manual_seed(1))
    deployed = fxdeploy.lower(model, (x,), target="onnxruntime")
    deployed.save(tmp_path / "artifact")
    few = x * 0.45  # a few rows above the threshold, fewer than k
    onnx_model = onnx.load(str(tmp_path / "artifact" / "model.onnx"))
    assert kept_extremes(onnx_model, {onnx_model.graph.input[0].name: few.numpy()}) == {}
    for inputs in (few, x):
        (values, index), (want_values, want_index) = deployed(inputs), model(inputs)
        assert 0 < len(want_values) <= 12
        torch.testing.assert_close(values, want_values)
        assert torch.equal(index, want_index)
