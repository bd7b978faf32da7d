"""Save → load round trips in a fresh process; tampered or malformed artifacts are refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

import fxdeploy
from examples import models
from tests.helpers import run_python


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory):
    model, (x,) = models.dict_mlp()
    deployed = fxdeploy.lower(model, (x,), dynamic_shapes={"x": {0: "batch"}})
    path = deployed.save(tmp_path_factory.mktemp("art") / "mlp")
    return deployed, x, path


def test_round_trip_in_fresh_process_gives_identical_outputs(saved, tmp_path: Path) -> None:
    deployed, x, path = saved
    torch.save(x, tmp_path / "x.pt")
    out = run_python(
        "import torch, fxdeploy\n"
        f"d = fxdeploy.load({str(path)!r})\n"
        f"x = torch.load({str(tmp_path / 'x.pt')!r})\n"
        "y = d(x)\n"
        f"torch.save(y, {str(tmp_path / 'y.pt')!r})\n"
        "print(d.target, sorted(y))\n"
    )
    assert out.strip() == "onnxruntime ['extra', 'score']"
    loaded = torch.load(tmp_path / "y.pt")
    want = deployed(x)
    assert torch.equal(loaded["score"], want["score"])
    assert all(torch.equal(a, b) for a, b in zip(loaded["extra"], want["extra"], strict=True))


def test_manifest_has_hashes_settings_and_versions(saved) -> None:
    _, _, path = saved
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["schema_version"] == 1 and manifest["fxdeploy_version"] == fxdeploy.__version__
    assert set(manifest["files"]) == {"model.onnx"} and len(manifest["files"]["model.onnx"]) == 64
    assert manifest["settings"]["threads"] == 2
    assert manifest["dims"]["batch"]["min"] >= 1


def _copy(path: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "copy"
    shutil.copytree(path, dest)
    return dest


def test_tampered_file_is_refused_naming_it(saved, tmp_path: Path) -> None:
    copy = _copy(saved[2], tmp_path)
    data = bytearray((copy / "model.onnx").read_bytes())
    data[len(data) // 2] ^= 0x01
    (copy / "model.onnx").write_bytes(bytes(data))
    with pytest.raises(fxdeploy.ArtifactError, match=r"model\.onnx: sha256 does not match"):
        fxdeploy.load(copy)


def test_truncated_and_missing_files_are_refused(saved, tmp_path: Path) -> None:
    copy = _copy(saved[2], tmp_path)
    (copy / "model.onnx").write_bytes((copy / "model.onnx").read_bytes()[:100])
    with pytest.raises(fxdeploy.ArtifactError, match="model.onnx"):
        fxdeploy.load(copy)
    (copy / "model.onnx").unlink()
    with pytest.raises(fxdeploy.ArtifactError, match="'model.onnx' listed in the manifest is missing"):
        fxdeploy.load(copy)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.update(schema_version=99), "schema_version 99 is newer"),
        (lambda m: m["files"].update({"../../etc/passwd": "0" * 64}), "points outside the artifact"),
        (lambda m: m.pop("inputs"), "manifest has no 'inputs'"),
        (lambda m: m.update(target="no-such-target"), "unknown target 'no-such-target'"),
    ],
)
def test_bad_manifest_is_refused(saved, tmp_path: Path, edit, message: str) -> None:
    copy = _copy(saved[2], tmp_path)
    manifest = json.loads((copy / "manifest.json").read_text())
    edit(manifest)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(fxdeploy.FxDeployError, match=message):
        fxdeploy.load(copy)


def test_manifest_that_is_not_json_is_refused(saved, tmp_path: Path) -> None:
    copy = _copy(saved[2], tmp_path)
    (copy / "manifest.json").write_bytes(b"\x80not json")
    with pytest.raises(fxdeploy.ArtifactError, match="manifest is not valid JSON"):
        fxdeploy.load(copy)


def test_save_over_existing_artifact_replaces_it_whole(saved, tmp_path: Path) -> None:
    deployed, x, _ = saved
    dest = tmp_path / "art"
    deployed.save(dest)
    deployed.save(dest)  # the second save swaps in a complete copy
    assert sorted(p.name for p in dest.iterdir()) == ["manifest.json", "model.onnx"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind
    assert torch.equal(fxdeploy.load(dest)(x)["score"], deployed(x)["score"])


def test_save_refuses_to_replace_a_foreign_directory(saved, tmp_path: Path) -> None:
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "data.txt").write_text("keep me")
    with pytest.raises(fxdeploy.ArtifactError, match="not an fxdeploy artifact"):
        saved[0].save(tmp_path / "precious")
    assert (tmp_path / "precious" / "data.txt").read_text() == "keep me"
