"""The example detector as it is written, no substitution, on the core leg (torch without
torchvision: TinyYolo calls fxdeploy.ops.batched_nms): dynamic batch, detection-aware parity with
eager, static padded engine outputs. tests/detectors/test_tiny_yolo.py runs it with torchvision's
NMS on every target."""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from examples import detector
from tests.detections import assert_same_detections


@pytest.fixture(scope="module")
def lowered():
    model, (x,) = detector.tiny_yolo()
    original = detector.TinyYolo.postprocess
    deployed = fxdeploy.lower(model, (x,), dynamic_shapes={"images": {0: ("batch", 1, 8)}})
    assert detector.TinyYolo.postprocess is original and "postprocess" not in model.__dict__
    return model, deployed


@pytest.mark.parametrize("batch", [1, 4])
def test_detections_match_eager(lowered, batch: int) -> None:
    model, deployed = lowered
    generator = torch.Generator().manual_seed(batch)
    images = torch.rand(batch, 3, 128, 128, generator=generator) * 255
    with torch.no_grad():
        want = model(images)  # the library's own postprocess: eager is unchanged
    got = deployed(images)
    assert isinstance(got, list) and len(got) == batch and set(got[0]) == {"boxes", "scores", "labels"}
    counts = [len(w["scores"]) for w in want]
    assert min(counts) > 5, "the check is vacuous without detections"
    images = assert_same_detections(want, got, iou=0.99, score_atol=1e-4)
    assert sum(m.matched for m in images) == sum(counts)


def test_engine_outputs_are_static_and_padded(lowered) -> None:
    """One image per engine call: rows at the static max_det, the padding zeroed, the count hidden."""
    model, deployed = lowered
    image = torch.rand(1, 3, 128, 128, generator=torch.Generator().manual_seed(7)) * 255
    out = deployed.execute({"images": image})
    assert deployed.output_names == ["0.boxes", "0.scores", "0.labels", "row_count_0"]
    boxes, scores, labels, count = (out[n] for n in deployed.output_names)
    assert boxes.shape == (1, 50, 4) and scores.shape == (1, 50) and count.shape == (1,)
    with torch.no_grad():
        want = model(image)[0]
    assert int(count) == len(want["scores"]) > 0
    assert bool((scores[0, int(count):] == 0).all()) and bool((boxes[0, int(count):] == 0).all())
    assert deployed.manifest["info"]["substitutions"] == []


def test_onnx_graph_uses_nonmaxsuppression(lowered, tmp_path) -> None:
    import onnx

    _, deployed = lowered
    path = deployed.save(tmp_path / "det")
    ops = {node.op_type for node in onnx.load(str(path / "model.onnx")).graph.node}
    assert "NonMaxSuppression" in ops and "NonZero" not in ops
