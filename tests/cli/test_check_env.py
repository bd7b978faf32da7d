"""``fxdeploy check-env``: every target, whether it runs here, and what to install when not."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import fxdeploy
from tests.helpers import ROOT

TARGETS = ["onnxruntime", "openvino", "ncnn", "tensorrt", "torchscript"]
SCRIPT = Path(sys.executable).parent / "fxdeploy"


def _check_env(*args: str) -> str:
    command = [str(SCRIPT)] if SCRIPT.is_file() else [sys.executable, "-m", "fxdeploy.cli"]
    result = subprocess.run(
        [*command, "check-env", *args], capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_check_env_lists_every_target_with_yes_or_the_reason() -> None:
    rows = {line.split()[0]: line.split(maxsplit=2)[1:] for line in _check_env().splitlines()[1:]}
    assert list(rows) == TARGETS
    statuses = fxdeploy.targets()
    for name, (mark, detail) in rows.items():
        status = statuses[name]
        assert mark == ("yes" if status.available else "no")
        assert detail == (status.version if status.available else status.reason)


def test_installed_runtimes_say_yes_and_tensorrt_says_why_not() -> None:
    report = json.loads(_check_env("--json"))
    assert list(report) == TARGETS
    for name, package in (("openvino", "openvino"), ("ncnn", "ncnn"), ("onnxruntime", "onnxruntime")):
        installed = importlib.util.find_spec(package) is not None
        assert report[name]["available"] == installed, report[name]
    assert report["torchscript"]["available"] and report["torchscript"]["version"]
    trt = report["tensorrt"]
    if not trt["available"]:
        assert "TensorRT" in trt["reason"] or "CUDA" in trt["reason"], trt
        assert trt["version"] is None or "no CUDA device" in trt["reason"]
