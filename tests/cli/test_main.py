"""The CLI: lower → run on a saved artifact, check-env, and errors as exit codes."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fxdeploy.cli.main import _parser, main
from tests.helpers import ROOT


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fxdeploy.cli", *args], capture_output=True, text=True, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}, timeout=300,
    )


def test_lower_then_run(tmp_path: Path) -> None:
    out = tmp_path / "art"
    lowered = _cli("lower", "examples/models.py:convnet", "--out", str(out), "--dynamic", "x:0:batch:1:8")
    assert lowered.returncode == 0, lowered.stderr
    assert "lowered ConvNet to onnxruntime" in lowered.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["dims"]["batch"] == {"min": 1, "opt": 2, "max": 8}
    ran = _cli("run", str(out), "--runs", "3", "--json")
    assert ran.returncode == 0, ran.stderr
    report = json.loads(ran.stdout)
    assert report["outputs"]["output"]["shape"] == [2, 10]
    assert report["stats_ms"]["count"] == 3


def test_module_factory_spec_and_bad_spec(tmp_path: Path) -> None:
    good = _cli("lower", "examples.models:dict_mlp", "--out", str(tmp_path / "a"))
    assert good.returncode == 0, good.stderr
    bad = _cli("lower", "examples/models.py:nope", "--out", str(tmp_path / "b"))
    assert bad.returncode == 2 and "has no factory named 'nope'" in bad.stderr


def test_run_on_a_broken_artifact_fails_with_a_message(tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()
    ran = _cli("run", str(tmp_path / "broken"))
    assert ran.returncode == 2 and "manifest.json is missing" in ran.stderr


def test_check_env_lists_onnxruntime() -> None:
    ran = _cli("check-env", "--json")
    assert ran.returncode == 0, ran.stderr
    rows = json.loads(ran.stdout)
    assert rows["onnxruntime"]["available"] is True and rows["onnxruntime"]["version"]


def test_help_lists_every_command_with_a_sentence(capsys: pytest.CaptureFixture[str]) -> None:
    """``fxdeploy --help`` names each command the parser has, each with its sentence; each command's
    own ``--help`` opens with that sentence."""
    action = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in action._choices_actions}
    assert sorted(helps) == ["bench", "check-env", "compare", "export-triton", "lower", "run"]
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for name, sentence in helps.items():
        assert len(sentence.split()) >= 5, (name, sentence)
        assert re.search(rf"\b{re.escape(name)} {re.escape(sentence)}", text), (name, text)
        with pytest.raises(SystemExit):
            main([name, "--help"])
        own = " ".join(capsys.readouterr().out.split())
        assert sentence[:1].upper() + sentence[1:] + "." in own, (name, own)
