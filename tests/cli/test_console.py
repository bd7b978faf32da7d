"""The console of the commands that work: their stages on a terminal, nothing from the libraries.

A YOLO-style detector (examples/detector.py) goes through lower, run, export-triton, compare and
bench as a user runs them; what torch, dynamo, pnnx or ncnn print goes to the debug log, never to
the terminal. Stages are drawn on a terminal only (a pseudo-terminal here), never into a pipe.
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

DETECTOR = "examples/detector.py:tiny_yolo"
NOISE = re.compile(r"Traceback|Warning|guard|not exists or registered")
STAGES = ("capture", "passes", "lowering", "loading", "check against eager")
ENV = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "TERM": "xterm", "COLUMNS": "160"}
REFUSED = """
import torch


class Branchy(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # a branch on the data: the capture refuses it at once
            return x * 2
        return x - 1


def factory():
    return Branchy(), (torch.ones(2, 3),)
"""


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fxdeploy.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=ENV, timeout=600)


def _cli_on_a_terminal(*args: str) -> tuple[int, str, str]:
    """(exit code, stdout, what reached the terminal): stderr on a pseudo-terminal, stdout a pipe."""
    main, child = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "fxdeploy.cli", *args], stdout=subprocess.PIPE, stderr=child,
                            cwd=ROOT, env=ENV)
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    out = proc.stdout.read().decode() if proc.stdout else ""
    proc.wait(timeout=600)
    return proc.returncode, out, b"".join(chunks).decode(errors="replace")


def _noise(text: str) -> list[str]:
    return [line for line in text.splitlines() if NOISE.search(line)]


def test_a_detector_through_every_command_prints_only_fxdeploy(tmp_path: Path) -> None:
    artifact = tmp_path / "yolo"
    code, out, terminal = _cli_on_a_terminal("lower", DETECTOR, "--out", str(artifact))
    assert code == 0, terminal
    assert "lowered TinyYolo to onnxruntime" in out
    for name in STAGES:  # each stage drawn, finished, with its elapsed time
        assert re.search(rf"✓.*onnxruntime: {name} +\S*\d:\d\d", terminal), (name, terminal)
    assert re.search(r"✓.*onnxruntime: check at example \[\[\d+, 3, \d+, \d+\]\] +\S*\d:\d\d", terminal), terminal
    assert _noise(out + terminal) == []

    commands = [
        ("run", str(artifact), "--runs", "2"),
        ("export-triton", str(artifact), "--repo", str(tmp_path / "repo")),
        ("compare", DETECTOR, "--targets", "torchscript"),
        ("bench", DETECTOR, "--targets", "torchscript", "--no-peers", "--no-inductor", "--warmup", "0",
         "--warmup-runs", "1", "--min-time", "0", "--min-runs", "1", "--rounds", "1"),
    ]
    for args in commands:
        result = _cli(*args)
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        assert _noise(result.stdout + result.stderr) == [], (args, result.stderr)
        assert not any(f"torchscript: {name}" in result.stderr for name in STAGES), "stages drawn into a pipe"
        assert "bench [" not in result.stderr, "bench's steps drawn into a pipe"
    assert "fxdeploy:torchscript" in result.stdout


@pytest.mark.parametrize("progress", [True, False])
def test_a_refused_lower_shows_the_failing_stage_and_writes_its_report(progress: bool, tmp_path: Path) -> None:
    """The capture refuses the model; the report says so, up to that stage, with the error; the
    terminal shows the stage failing unless --no-progress; the debug log's path is printed."""
    model = tmp_path / "branchy.py"
    model.write_text(REFUSED)
    report = tmp_path / "report.md"
    flags = [] if progress else ["--no-progress"]
    code, out, terminal = _cli_on_a_terminal("lower", f"{model}:factory", "--out", str(tmp_path / "a"),
                                             "--report", str(report), *flags)
    assert code == 2, terminal
    assert ("✗ onnxruntime: capture" in terminal) is progress, terminal
    assert "fxdeploy: error: fxdeploy could not capture Branchy" in terminal
    log = re.search(r"what torch and the runtimes printed: (\S+\.log)", terminal)
    assert log is not None and Path(log.group(1)).is_file(), terminal
    Path(log.group(1)).unlink()
    text = report.read_text()
    assert text.startswith("# fxdeploy lowering report: onnxruntime (failed)")
    assert "| capture | onnxruntime | FAILED |" in text and "| passes |" not in text
    assert "In stage **capture** of target `onnxruntime`:" in text
    assert "CaptureError: fxdeploy could not capture Branchy" in text and "if x.sum() > 0" in text
    assert not (tmp_path / "a").exists()
