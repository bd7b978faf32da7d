"""examples/detector.py's TinyYolo, with no substitution: its postprocess loops over the images,
filters by score with a boolean mask, runs batched_nms, slices [:max_det] and returns a list of
dicts. fxdeploy captures one image (the loop fixes the batch), masks the data-dependent sizes,
and runs a dynamic batch image by image; every target must match eager detection by detection.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch

import fxdeploy
from examples.detector import TinyYolo
from fxdeploy.capture.substitution import builtin_substitutions
from tests.detections import assert_same_detections
from tests.helpers import require_target

TARGETS = ["onnxruntime", "openvino", "torchscript", "ncnn"]


def tiny_yolo() -> TinyYolo:
    """Random weights with scores spread so that 60-80 detections per image survive NMS."""
    torch.manual_seed(0)
    model = TinyYolo(max_det=300, iou_threshold=0.45, conf_threshold=0.7).eval()
    with torch.no_grad():
        for head in model.cls_head:
            head.weight.normal_(0.0, 8.0)
            head.bias.fill_(-1.0)
    return model


def images(count: int, seed: int) -> torch.Tensor:
    """Random images; the first two repeat a 32 px patch over a quadrant, so equal features give
    exact score ties at different boxes."""
    x = torch.rand(count, 3, 128, 128, generator=torch.Generator().manual_seed(seed)) * 255
    for i in range(min(2, count)):
        x[i, :, :64, :64] = x[i, :, :32, :32].repeat(1, 2, 2)
    return x


def test_inputs_make_parity_meaningful() -> None:
    model = tiny_yolo()
    with torch.no_grad():
        out = model(images(4, 1))
    for i, result in enumerate(out):
        scores = result["scores"]
        assert len(scores.unique()) >= 50, f"image {i}: {len(scores.unique())} distinct scores"
        assert len(scores) < model.max_det, "the max_det cap would make tie-breaking decide the set"
        has_ties = len(scores.unique()) < len(scores)
        assert has_ties == (i < 2), f"image {i}: ties {has_ties}"


@functools.cache
def _shared() -> TinyYolo:
    """One for the test below, never changed by it: lowered for another target it starts from the
    first lowering's capture (fxdeploy.capture.memo), as in a user's process."""
    return tiny_yolo()


@pytest.mark.parametrize("target", TARGETS)
def test_tiny_yolo_without_substitution(target: str, tmp_path: Path) -> None:
    require_target(target)
    model = _shared()
    deployed = fxdeploy.lower(
        model, (images(2, 0),), target=target, dynamic_shapes={"images": {0: ("batch", 1, 8)}}
    )
    builtin = {s.name for s in builtin_substitutions()}  # torchvision's NMS functions, where installed
    assert set(deployed.manifest["info"]["substitutions"]) <= builtin
    assert deployed.manifest["per_image"]["dim"] == "batch"
    deployed.save(tmp_path / "tiny_yolo")
    loaded = fxdeploy.load(tmp_path / "tiny_yolo")
    for batch, seed in ((1, 3), (4, 1), (8, 2)):
        x = images(batch, seed)
        with torch.no_grad():
            want = model(x)
        for runner in (deployed, loaded) if batch == 1 else (deployed,):  # the loaded artifact: same files
            got = runner(x)
            assert isinstance(got, list) and all(set(r) == {"boxes", "scores", "labels"} for r in got)
            assert_same_detections(want, got)
