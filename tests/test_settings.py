"""Config file, CLI flags and Python Settings resolve to the same settings."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

import fxdeploy
from fxdeploy.cli import settings as settings_cli
from fxdeploy.settings import CaptureSettings, Settings
from fxdeploy.targets.sections import NcnnSettings, OnnxSettings, TensorRTSettings
from tests.helpers import ROOT

PYTHON = Settings(  # every field away from its default, the flag included: the subject is the settings themselves
    threads=3, precision="fp16", verify=False, capture=CaptureSettings(mode="strict"),
    sections={"ncnn": NcnnSettings(fp16=True), "onnx": OnnxSettings(opset=21),
              "tensorrt": TensorRTSettings(workspace_gib=1.5)},
)
CONFIG = """
threads = 3
precision = "fp16"
verify = false
[capture]
mode = "strict"
[ncnn]
fp16 = true
[onnx]
opset = 21
[tensorrt]
workspace_gib = 1.5
"""
FLAGS = ["--threads", "3", "--precision", "fp16", "--no-verify", "--capture-mode", "strict", "--ncnn-fp16",
         "--onnx-opset", "21", "--tensorrt-workspace-gib", "1.5"]


def _resolve(argv: list[str]) -> Settings:
    parser = argparse.ArgumentParser()
    settings_cli.add_arguments(parser)
    return settings_cli.resolve(parser.parse_args(argv))


def test_config_file_flags_and_python_agree(tmp_path: Path) -> None:
    config = tmp_path / "fx.toml"
    config.write_text(CONFIG)
    assert _resolve(["--config", str(config)]) == PYTHON
    assert _resolve(FLAGS) == PYTHON
    # flags win over the config file, which wins over the preset
    assert _resolve(["--preset", "fp16", "--config", str(config), "--threads", "5"]).threads == 5
    assert _resolve(["--preset", "fp16"]).atol == 1e-2


def test_print_settings_round_trips_through_the_cli(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "fxdeploy.cli", "lower", "examples/models.py:convnet", "--print-settings", *FLAGS],
        capture_output=True, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    printed = tomllib.loads(out.stdout)
    assert Settings.from_dict(printed) == PYTHON
    (tmp_path / "again.toml").write_text(out.stdout)
    assert _resolve(["--config", str(tmp_path / "again.toml")]) == PYTHON


def test_every_field_has_a_flag_with_its_docstring() -> None:
    parser = argparse.ArgumentParser()
    settings_cli.add_arguments(parser)
    text = parser.format_help()
    for path, _, _, _ in settings_cli.leaf_fields():
        assert "--" + "-".join(path).replace("_", "-") in text
    assert "intra-op threads for every runtime" in text


@pytest.mark.parametrize(
    ("data", "error", "message"),
    [
        ({"threads": "2"}, TypeError, r"Settings.threads: expected int, got str"),
        ({"precision": "int4"}, ValueError,
         r"Settings.precision: expected one of \['fp32', 'fp16', 'bf16', 'int8'\], got 'int4'"),
        ({"capture": {"mode": "fast"}}, ValueError, r"CaptureSettings.mode: expected one of"),
        ({"ncnn": {"fp17": True}}, ValueError, r"unknown setting\(s\) \['fp17'\]"),
        ({"threads": 0}, ValueError, r"threads must be in \[1, 1024\], got 0"),
    ],
)
def test_bad_settings_name_the_field(data: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        Settings.from_dict(data)


def test_bad_config_file_is_named(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("threads = [")
    with pytest.raises(ValueError, match="bad.toml is not valid TOML"):
        _resolve(["--config", str(config)])
    config.write_text("thread = 2")
    with pytest.raises(ValueError, match=r"bad.toml: unknown setting 'thread'"):
        _resolve(["--config", str(config)])


def test_cli_shape_syntax_lowers_with_ranges_and_writes_a_report(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "fxdeploy.cli", "lower", "examples/models.py:convnet", "--out", str(tmp_path / "a"),
         "--shape", "x:batch=1..2..4x3x32..64..96x32..64..96", "--report", str(tmp_path / "r.md")],
        capture_output=True, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    deployed = fxdeploy.load(tmp_path / "a")
    assert deployed.manifest["dims"] == {
        "batch": {"min": 1, "opt": 2, "max": 4},
        "x_2": {"min": 32, "opt": 64, "max": 96},
        "x_3": {"min": 32, "opt": 64, "max": 96},
    }
    report = (tmp_path / "r.md").read_text()
    assert "| remove_dropout | yes | aten.dropout.default: 1 → 0 |" in report
    assert "| max | [[4, 3, 96, 96]] |" in report


def test_an_artifact_saved_with_the_retired_nms_section_still_loads(tmp_path) -> None:
    """Settings.nms was never read and is gone; manifests written before keep loading."""
    import json

    import torch

    import fxdeploy
    from examples.models import convnet

    model, (x,) = convnet()
    path = fxdeploy.lower(model, (x,)).save(tmp_path / "a")
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["settings"]["nms"] = {"iou_threshold": 0.5, "score_threshold": 0.05}
    (path / "manifest.json").write_text(json.dumps(manifest))
    with torch.no_grad():
        torch.testing.assert_close(fxdeploy.load(path)(x), model(x), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="unknown setting"):
        fxdeploy.Settings.from_dict({"nms": {}})  # a config file that still sets it is told
