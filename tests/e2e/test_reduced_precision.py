"""fp16 and bf16 lowering for a classifier and the detector, within tolerance, on every target that
takes the precision; the targets that do not refuse it by name.

Documented tolerance (README, "Precision"): classifier logits within 1e-2 (fp16) or 3e-2 (bf16) of
eager fp32 (scaled by max(1, |logits|)); detections matched by label with IoU >= 0.9 and scores within
2e-2, except detections whose score is within 2e-2 of the score threshold, which reduced precision
may legitimately add or drop.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
import torch

import fxdeploy
from examples import detector
from fxdeploy.errors import LoweringError
from fxdeploy.settings import Settings
from tests.detections import assert_same_detections

SETTINGS = {"fp16": Settings(precision="fp16", atol=1e-2), "bf16": Settings(precision="bf16", atol=3e-2)}
CASES = [
    ("fp16", "onnxruntime"), ("fp16", "openvino"), ("fp16", "torchscript"),
    ("bf16", "openvino"), ("bf16", "torchscript"),
]


def _available(target: str, precision: str = "fp32") -> None:
    status = fxdeploy.targets().get(target)
    if status is None or not status.available:
        pytest.skip(f"{target}: {status.reason if status else 'not registered'}")
    if target == "openvino" and precision == "bf16":
        import openvino

        capabilities = openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
        if "BF16" not in capabilities:
            pytest.skip(f"openvino bf16 needs a CPU with native bf16; this one has {capabilities}")


@functools.cache
def _classifier() -> tuple[torch.nn.Module, torch.Tensor]:
    """One for the module, never changed by a test: lowered again (another precision or target), it
    starts from the first lowering's capture (fxdeploy.capture.memo), as in a user's process."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import ResNetConfig, ResNetForImageClassification

    torch.manual_seed(0)
    config = ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], num_labels=10)
    return ResNetForImageClassification(config).eval(), torch.randn(2, 3, 64, 64)


@pytest.mark.parametrize(("precision", "target"), CASES)
def test_reduced_precision_classifier(precision: str, target: str, tmp_path: Path) -> None:
    _available(target, precision)
    settings = SETTINGS[precision]
    model, x = _classifier()
    deployed = fxdeploy.lower(model, (x,), target=target, settings=settings,
                              dynamic_shapes={"pixel_values": {0: ("batch", 1, 4)}})
    assert deployed.manifest["info"]["precision"]["policy"] == precision
    with torch.no_grad():
        want = model(x).logits
    got = deployed(x).logits
    assert got.dtype == torch.float32
    error = (got - want).abs().max().item() / max(1.0, want.abs().max().item())
    assert error <= settings.atol
    if precision == "bf16":  # it really ran in bf16 (8 mantissa bits), not silently in fp32
        assert error > 1e-4
    loaded = fxdeploy.load(deployed.save(tmp_path / "artifact"))  # the precision travels in the manifest
    assert torch.equal(loaded(x)["logits"], got)  # a loaded artifact returns dicts: no code is imported


@functools.cache
def _detector() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """One for the module, as ``_classifier``."""
    return detector.tiny_yolo()


@pytest.mark.parametrize(("precision", "target"), CASES)
def test_reduced_precision_detector(precision: str, target: str) -> None:
    _available(target, precision)
    model, (x,) = _detector()
    deployed = fxdeploy.lower(model, (x,), target=target, settings=SETTINGS[precision])
    precision_info = deployed.manifest["info"]["precision"]
    assert precision_info[f"{precision}_ops"] > 0
    # a static batch: the per-image loop unrolls, one NMS per image, each kept in fp32
    assert precision_info["fp32_ops"]["fxdeploy.multiclass_nms.default"] == len(x)
    with torch.no_grad():
        want = model(x)
    got = deployed(x)
    assert sum(len(w["scores"]) for w in want) > 0
    # reduced precision may move a score across the 0.25 threshold: those detections may appear or vanish.
    near = abs(model.conf_threshold)
    stable_want = [_above(w, near + 2e-2) for w in want]
    stable_got = [_above(g, near + 2e-2) for g in got]
    assert_same_detections(stable_want, stable_got, iou=0.9, score_atol=2e-2)


def _above(result: dict[str, torch.Tensor], threshold: float) -> dict[str, torch.Tensor]:
    keep = result["scores"] > threshold
    return {k: v[keep] for k, v in result.items()}


@pytest.mark.parametrize("target", ["onnxruntime", "ncnn"])
def test_a_target_without_bf16_refuses_it_by_name(target: str) -> None:
    _available(target)
    model, x = _classifier()
    with pytest.raises(LoweringError, match=rf"Settings.precision: target '{target}' supports "
                       r"\['fp32', 'fp16'(, 'int8')?\], got 'bf16'; targets with bf16: .*openvino"):
        fxdeploy.lower(model, (x,), target=target, settings=SETTINGS["bf16"])


def test_ncnn_fp16_runs_the_whole_engine_in_fp16(tmp_path: Path) -> None:
    """ncnn's fp16 (``Settings(precision="fp16")`` or ``ncnn.fp16``) is its own: the whole engine
    stores and computes in fp16, with no precision policy (ncnn has no per-layer precision), while
    the host stages (the NMS, the padding) stay fp32. The same documented tolerances hold: a
    classifier's logits within 1e-2, the detector's detections paired with scores within 2e-2."""
    _available("ncnn")
    settings = SETTINGS["fp16"]
    model, x = _classifier()
    deployed = fxdeploy.lower(model, (x,), target="ncnn", settings=settings,
                              dynamic_shapes={"pixel_values": {0: ("batch", 1, 4)}})
    assert deployed.manifest["info"]["precision"] == {"policy": "fp16"}
    with torch.no_grad():
        want = model(x).logits
    error = (deployed(x).logits - want).abs().max().item() / max(1.0, want.abs().max().item())
    assert 1e-5 < error <= settings.atol  # it ran in fp16 (not fp32), within the tolerance
    detector_model, (images,) = detector.tiny_yolo()
    deployed = fxdeploy.lower(detector_model, (images,), target="ncnn", settings=settings,
                              dynamic_shapes={"images": {0: ("batch", 1, 4)}})
    with torch.no_grad():
        want = detector_model(images)
    got = deployed(images)
    assert sum(len(w["scores"]) for w in want) > 0
    near = abs(detector_model.conf_threshold)
    assert_same_detections([_above(w, near + 2e-2) for w in want], [_above(g, near + 2e-2) for g in got],
                           iou=0.9, score_atol=2e-2)
