"""fp16 lowering on ONNX Runtime and OpenVINO for a classifier and the detector, within tolerance.

Documented tolerance (README, "Precision"): classifier logits within 1e-2 of eager fp32 (scaled by
max(1, |logits|)); detections matched by label with IoU >= 0.9 and scores within 2e-2, except detections whose
score is within 2e-2 of the score threshold, which fp16 may legitimately add or drop.
"""

from __future__ import annotations

import os

import pytest
import torch

import fxdeploy
from examples import detector
from fxdeploy.settings import Settings
from tests.detections import assert_same_detections

FP16 = Settings(precision="fp16", atol=1e-2)
TARGETS = ["onnxruntime", "openvino"]


def _available(target: str) -> None:
    status = fxdeploy.targets().get(target)
    if status is None or not status.available:
        pytest.skip(f"{target}: {status.reason if status else 'not registered'}")


def _classifier() -> tuple[torch.nn.Module, torch.Tensor]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import ResNetConfig, ResNetForImageClassification

    torch.manual_seed(0)
    config = ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], num_labels=10)
    return ResNetForImageClassification(config).eval(), torch.randn(2, 3, 64, 64)


@pytest.mark.parametrize("target", TARGETS)
def test_fp16_classifier(target: str) -> None:
    _available(target)
    model, x = _classifier()
    deployed = fxdeploy.lower(model, (x,), target=target, settings=FP16,
                              dynamic_shapes={"pixel_values": {0: ("batch", 1, 4)}})
    assert deployed.manifest["info"]["precision"]["policy"] == "fp16"
    with torch.no_grad():
        want = model(x).logits
    got = deployed(x).logits
    assert got.dtype == torch.float32
    assert (got - want).abs().max().item() <= 1e-2 * max(1.0, want.abs().max().item())


@pytest.mark.parametrize("target", TARGETS)
def test_fp16_detector(target: str) -> None:
    _available(target)
    model, (x,) = detector.tiny_yolo()
    deployed = fxdeploy.lower(model, (x,), target=target, settings=FP16,
                              substitutions=detector.FXDEPLOY_SUBSTITUTIONS)
    with torch.no_grad():
        want = model(x)
    got = deployed(x)
    assert sum(len(w["scores"]) for w in want) > 0
    # fp16 may move a score across the 0.25 threshold: those detections may appear or vanish.
    near = abs(model.conf_threshold)
    stable_want = [_above(w, near + 2e-2) for w in want]
    stable_got = [_above(g, near + 2e-2) for g in got]
    assert_same_detections(stable_want, stable_got, iou=0.9, score_atol=2e-2)


def _above(result: dict[str, torch.Tensor], threshold: float) -> dict[str, torch.Tensor]:
    keep = result["scores"] > threshold
    return {k: v[keep] for k, v in result.items()}
