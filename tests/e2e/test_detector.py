"""The example detector: one substitution, dynamic batch, detection-aware parity with eager."""

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
    deployed = fxdeploy.lower(
        model, (x,), dynamic_shapes={"images": {0: ("batch", 1, 8)}},
        substitutions=detector.FXDEPLOY_SUBSTITUTIONS,
    )
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
    assert sum(counts) > 0, "the check is vacuous without detections"
    report = assert_same_detections(want, got, iou=0.99, score_atol=1e-4)
    assert report.matched == sum(counts)


def test_engine_outputs_are_static_and_padded(lowered) -> None:
    _, deployed = lowered
    out = deployed.execute({"images": torch.rand(3, 3, 128, 128) * 255})
    boxes, scores, labels, counts = (out[n] for n in deployed.output_names)
    assert boxes.shape == (3, 50, 4) and scores.shape == (3, 50) and counts.shape == (3,)
    pad = torch.arange(50)[None] >= counts[:, None]
    assert bool((labels[pad] == -1).all()) and bool((scores[pad] == 0).all())
    assert deployed.manifest["info"]["substitutions"] == ["examples.detector.TinyYolo.postprocess"]


def test_onnx_graph_uses_nonmaxsuppression(lowered, tmp_path) -> None:
    import onnx

    _, deployed = lowered
    path = deployed.save(tmp_path / "det")
    ops = {node.op_type for node in onnx.load(str(path / "model.onnx")).graph.node}
    assert "NonMaxSuppression" in ops
