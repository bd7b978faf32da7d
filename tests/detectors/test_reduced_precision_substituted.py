"""examples/detector.py's TinyYolo at fp16 and bf16 where torchvision is installed: its
``batched_nms`` is then substituted, so lower() also checks the artifact against the model run
without the substitution. Reduced precision moves scores across the 0.25 threshold and reorders
near-equal ones; lower() refused both artifacts here (the check paired the second image's rows by
the first image's boxes; the comparison without the substitution excused no threshold crossing),
while the core leg, without torchvision, never saw it. Tolerances as tests/e2e/test_reduced_precision.py.
"""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from examples import detector
from fxdeploy.settings import Settings
from tests.detections import assert_same_detections
from tests.detectors.conftest import require
from tests.helpers import require_target

CASES = [("fp16", "onnxruntime", 1e-2), ("bf16", "torchscript", 3e-2)]


@pytest.mark.parametrize(("precision", "target", "atol"), CASES, ids=[f"{p}-{t}" for p, t, _ in CASES])
def test_reduced_precision_with_a_substituted_nms_matches_the_model(precision: str, target: str, atol: float) -> None:
    require("torchvision")
    require_target(target)
    model, (x,) = detector.tiny_yolo()
    deployed = fxdeploy.lower(model, (x,), target=target, settings=Settings(precision=precision, atol=atol))
    assert deployed.manifest["info"]["substitutions"] == ["torchvision.ops.boxes.batched_nms"]
    with torch.no_grad():
        want = model(x)
    got = deployed(x)
    assert sum(len(w["scores"]) for w in want) > 20
    stable = abs(model.conf_threshold) + 2e-2  # a score this close to the threshold may appear or vanish
    assert_same_detections([_above(w, stable) for w in want], [_above(g, stable) for g in got], iou=0.9,
                           score_atol=2e-2)


def _above(result: dict[str, torch.Tensor], threshold: float) -> dict[str, torch.Tensor]:
    keep = result["scores"] > threshold
    return {k: v[keep] for k, v in result.items()}
