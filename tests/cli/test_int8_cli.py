"""``fxdeploy lower --precision int8 --calibration``: from a .npz of input arrays (read without
pickle) and from a factory; the artifact's manifest records the calibration it was built from."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fxdeploy.cli.main import main
from tests.helpers import require_target

MODEL = "examples/models.py:convnet"  # input x, example shape (2, 3, 64, 64)


def _samples(count: int, batch: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(batch, 3, 64, 64, generator=generator) for _ in range(count)]


def _lowered(tmp_path: Path, calibration: str, capsys: pytest.CaptureFixture[str]) -> dict:
    out = tmp_path / "artifact"
    report = tmp_path / "report.md"
    code = main(["lower", MODEL, "--out", str(out), "--dynamic", "x:0:batch:1:8", "--precision", "int8",
                 "--calibration", calibration, "--no-progress", "--report", str(report)])
    assert code == 0, capsys.readouterr()
    manifest = json.loads((out / "manifest.json").read_text())
    text = report.read_text()
    for name, why in manifest["info"]["int8"]["float_ops"].items():  # the report lists what stayed float
        assert f"| {name} | {why} |" in text
    assert manifest["info"]["int8"]["float_ops"]
    return manifest


def test_calibration_from_an_npz(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    require_target("onnxruntime")
    path = tmp_path / "calibration.npz"
    np.savez(path, x=torch.cat(_samples(10, 1)).numpy()[:, None].repeat(2, axis=1))  # 10 samples of batch 2
    manifest = _lowered(tmp_path, str(path), capsys)
    assert manifest["info"]["int8"]["calibration"] == {"samples": 10, "method": "minmax"}
    assert manifest["settings"]["precision"] == "int8"


def test_calibration_from_a_factory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    require_target("onnxruntime")
    source = tmp_path / "calibrate.py"
    source.write_text(
        "import torch\n"
        "def images():\n"
        "    g = torch.Generator().manual_seed(0)\n"
        "    return [(torch.randn(4, 3, 64, 64, generator=g),) for _ in range(9)]\n"
    )
    manifest = _lowered(tmp_path, f"{source}:images", capsys)
    assert manifest["info"]["int8"]["calibration"]["samples"] == 9


def test_an_npz_with_unequal_sample_counts_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.npz"
    np.savez(path, a=np.zeros((3, 1)), b=np.zeros((4, 1)))
    code = main(["lower", MODEL, "--out", str(tmp_path / "o"), "--precision", "int8", "--calibration", str(path)])
    assert code == 2
    assert "each [samples, ...] with the same number of samples; got arrays of shapes [[3, 1], [4, 1]]" in \
        capsys.readouterr().err
