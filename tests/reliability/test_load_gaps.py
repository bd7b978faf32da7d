"""Manifests that pass fxdeploy's checks but would break inside a target's loader: each is an
ArtifactError naming the artifact (load() wraps the loader's and the runtime's own exceptions),
or, where the files fit, the artifact runs correctly."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import fxdeploy
from tests.reliability.artifact_edits import copy_artifact, edit_manifest, read_manifest
from tests.reliability.conftest import TARGETS, require, tolerance

NEEDS = {
    "onnxruntime": {"model.onnx"}, "openvino": {"model.onnx"}, "ncnn": {"model.ncnn.param", "model.ncnn.bin"},
    "torchscript": {"model.pt"}, "tensorrt": {"model.plan"},
}
"""The files each built-in target's loader opens by name."""
@pytest.mark.parametrize(("target", "relabel"), [(a, b) for a in TARGETS for b in TARGETS if a != b])
def test_artifact_relabelled_as_another_target(convnet, tmp_path: Path, target: str, relabel: str, request) -> None:
    """Relabelled, an artifact either runs correctly (same files) or is refused by name."""
    require(relabel)
    lowered = convnet(target)
    root = copy_artifact(lowered.saved, tmp_path / "art")
    edit_manifest(root, lambda m: m.update(target=relabel))
    readable = NEEDS.get(relabel, {"?"}) <= set(read_manifest(root)["files"])
    try:
        deployed = fxdeploy.load(root)
    except fxdeploy.ArtifactError as exc:
        assert str(root) in str(exc)
        assert not readable, f"{relabel} can read a {target} artifact's files but refused it: {exc}"
    else:
        assert readable, f"{relabel} loaded a {target} artifact it cannot read"
        x = torch.randn(2, 3, 64, 64)
        with torch.no_grad():
            want = lowered.model(x)
        assert (deployed(x) - want).abs().max().item() <= tolerance(relabel)


def test_absurd_thread_count_in_manifest_is_an_artifact_error(convnet, tmp_path: Path) -> None:
    root = copy_artifact(convnet("onnxruntime").saved, tmp_path / "art")
    edit_manifest(root, lambda m: m["settings"].update(threads=10**30))
    with pytest.raises(fxdeploy.ArtifactError, match="threads"):
        fxdeploy.load(root)
