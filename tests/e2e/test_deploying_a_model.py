"""docs/deploying-a-model.md, run: the YOLOX-Pose-like detector of examples/pose.py deploys with
no user code on every target, with a dynamic batch, and matches eager detection by detection,
keypoints included, at batch 1 and 3, after save/load too; ``fxdeploy.load(dir)`` returns eager's
list of dicts with no ``unpack=``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import fxdeploy
from examples.pose import images, pose
from fxdeploy.parity import compare_outputs
from tests.helpers import require_target


@pytest.mark.parametrize("target", ["onnxruntime", "openvino", "torchscript", "ncnn"])
def test_the_pose_detector_deploys_with_no_user_code(target: str, tmp_path: Path) -> None:
    require_target(target)
    model, (example,) = pose()
    deployed = fxdeploy.lower(model, (example,), target=target, dynamic_shapes={"images": {0: ("batch", 1, 8)}})
    assert deployed.manifest["info"]["substitutions"] == []
    loaded = fxdeploy.load(deployed.save(tmp_path / "pose"))  # no unpack=: the structure is data
    for batch, seed in ((1, 3), (3, 4)):
        x = images(batch, seed)
        with torch.no_grad():
            want = model(x)
        assert all(20 <= len(d["scores"]) < model.max_det for d in want), [len(d["scores"]) for d in want]
        for runner in (deployed, loaded):
            got = runner(x)
            assert isinstance(got, list) and [list(d) for d in got] == [list(d) for d in want]
            results = compare_outputs(want, got, fxdeploy.parity.Tolerances(score_atol=1e-3))
            assert all(r.ok for r in results), [r.detail for r in results]
            assert [r.kind for r in results] == ["detections"]


def test_the_guides_substitution_matches_eager_and_load_takes_its_unpack(tmp_path: Path) -> None:
    """Part 2: the hand-written tensor-only postprocess, checked by lower() against the model itself."""
    require_target("onnxruntime")
    from examples.pose import PoseHead, tensor_only_postprocess, unpack

    model, (example,) = pose()
    substitutions = {PoseHead.postprocess: fxdeploy.Substitution(PoseHead.postprocess, tensor_only_postprocess,
                                                                  unpack=unpack)}
    deployed = fxdeploy.lower(model, (example,), dynamic_shapes={"images": {0: ("batch", 1, 8)}},
                              substitutions=substitutions)
    assert deployed.manifest["info"]["substitutions"] != []
    path = deployed.save(tmp_path / "pose")
    x = images(3, 4)
    with torch.no_grad():
        want = model(x)
    for got in (deployed(x), fxdeploy.load(path, unpack=unpack)(x)):
        results = compare_outputs(want, got, fxdeploy.parity.Tolerances(score_atol=1e-4))
        assert all(r.ok for r in results), [r.detail for r in results]
    with pytest.warns(fxdeploy.errors.UnpackWarning, match=r"unpack \(examples\.pose\.unpack\).*fxdeploy\.load"):
        without = fxdeploy.load(path)
    padded = without(x)  # without unpack=: the padded tuple, and the count to cut it by
    assert isinstance(padded, tuple) and padded[3].tolist() == [len(d["scores"]) for d in want]
