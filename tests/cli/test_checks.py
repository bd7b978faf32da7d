"""Every CLI argument is checked before any work: a bad one is one line on stderr, exit code 2, fast.

Most cases call ``main`` in this process, so the time measured is the command's own (torch is
imported already); one runs the real entry point in a subprocess.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from fxdeploy.cli.main import main
from tests.helpers import ROOT

MODEL = "examples/models.py:convnet"  # input x, example shape (2, 3, 64, 64)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str, float]:
    start = time.perf_counter()
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own errors exit; the commands' return
        code = exit_.code  # type: ignore[assignment]
    elapsed = time.perf_counter() - start
    captured = capsys.readouterr()
    return int(code), captured.out, captured.err, elapsed


def _assert_refused(argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> str:
    code, out, err, elapsed = _run(argv, capsys)
    assert code == 2, (out, err)
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    assert expected in err, err
    assert elapsed < 5, f"{elapsed:.1f} s: something ran before the argument was checked"
    return err


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "file").write_text("not a directory")
    (tmp_path / "dir").mkdir()
    (tmp_path / "bad.toml").write_text("thread = 2\n")
    return {"file": str(tmp_path / "file"), "dir": str(tmp_path / "dir"), "out": str(tmp_path / "art"),
            "toml": str(tmp_path / "bad.toml"), "missing": str(tmp_path / "missing")}


ISSUE_CASES = [
    (["--out", "{file}"], "argument --out: '{file}' is an existing file; expected a directory"),
    (["--out", "{out}", "--dynamic", "images:0:batch:4:1"], "'images:0:batch:4:1': MIN 4 is not below MAX 1"),
    (["--out", "{out}", "--dynamic", "images:zero"], "'images:zero': DIM 'zero' is not an integer"),
]
MORE_LOWER_CASES = [
    (["--out", "{out}", "--dynamic", "x:0:batch:1"], "'x:0:batch:1': 4 field(s); expected INPUT:DIM"),
    (["--out", "{out}", "--dynamic", "x:0:batch:1:big"], "MAX 'big' is not an integer"),
    (["--out", "{out}", "--dynamic", "x:-1"], "DIM -1 is below 0"),
    (["--out", "{out}", "--dynamic", "x:0:1batch"], "NAME '1batch' is not a Python identifier"),
    (["--out", "{out}", "--dynamic", "images:0"], "input 'images' is not one of the model's inputs ['x']"),
    (["--out", "{out}", "--dynamic", "x:4"], "x has rank 4, so dim 4 does not exist"),
    (["--out", "{out}", "--dynamic", "x:0", "--dynamic", "x:0:b"], "dim 0 of 'x' is given twice"),
    (["--out", "{out}", "--shape", "x:1..8x3x32x32"], "x dim 2 is fixed at 32, the example input has 64"),
    (["--out", "{out}", "--shape", "x:8..1x3x64x64"], "dim 0 range '8..1'"),
    (["--out", "{out}", "--shape", "y:1..8x3x64x64"], "input 'y' is not one of the model's inputs ['x']"),
    (["--out", "{out}", "--shape", "x:1..8x3x64"], "3 dims given, the example input has rank 4"),
    (["--out", "{out}", "--shape", "x:4..8x3x64x64"], "range 4..8 leaves out the example's size 2"),
    (["--out", "{out}", "--dynamic", "x:0", "--shape", "x:1..8x3x64x64"], "--dynamic and --shape: both given"),
    (["--out", "{out}", "--target", "nope"], "argument --target: unknown target 'nope'"),
    (["--out", "{out}", "--precision", "bf16"], "target 'onnxruntime' supports ['fp32', 'fp16', 'int8'], got 'bf16'"),
    (["--out", "{out}", "--threads", "0"], "argument --threads: 0: Settings.threads must be in [1, 1024]"),
    (["--out", "{out}", "--threads", "two"], "argument --threads: invalid int value: 'two'"),
    (["--out", "{out}", "--precision", "int4"], "argument --precision: invalid choice: 'int4'"),
    (["--out", "{out}", "--precision", "int8"], "argument --calibration: missing; --precision int8 needs"),
    (["--out", "{out}", "--calibration", "{missing}.npz"], "argument --calibration: '{missing}.npz': the calibration"),
    (["--out", "{out}", "--calibration", "pkg.mod:make"], "argument --calibration: given, but --precision is 'fp32'"),
    (["--out", "{out}", "--config", "{missing}"], "argument --config: '{missing}' does not exist"),
    (["--out", "{out}", "--config", "{toml}"], "argument --config: {toml}: unknown setting 'thread'"),
    (["--out", "{file}/sub"], "is a file, so nothing can be written under it"),
    (["--out", "{out}", "--report", "{dir}"], "argument --report: '{dir}' is a directory"),
    ([], "argument --out: missing"),
    (["--out", "{out}", "--bogus"], "unrecognized arguments: --bogus"),
]


@pytest.mark.parametrize(("flags", "expected"), ISSUE_CASES + MORE_LOWER_CASES)
def test_lower_refuses_a_bad_argument_before_lowering(
    flags: list[str], expected: str, paths: dict[str, str], capsys: pytest.CaptureFixture[str],
) -> None:
    _assert_refused(["lower", MODEL, *[f.format(**paths) for f in flags]], expected.format(**paths), capsys)
    assert not Path(paths["out"]).exists()


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("{missing}.py:convnet", "the model file {missing}.py does not exist"),
        ("examples/models.py", "expected file.py:factory or package.module:factory"),
        ("examples/models.py:nope", "has no factory named 'nope'"),
        ("examples/models.py:not-a-name", "the factory a Python name"),
        ("no.such.module:factory", "importing it failed with ModuleNotFoundError"),
    ],
)
def test_a_model_spec_that_gives_no_model_is_refused(
    model: str, expected: str, paths: dict[str, str], capsys: pytest.CaptureFixture[str],
) -> None:
    _assert_refused(["lower", model.format(**paths), "--out", paths["out"]], expected.format(**paths), capsys)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["run", "{missing}"], "argument artifact: '{missing}' does not exist; expected an artifact directory"),
        (["run", "{file}"], "'{file}' is a file; expected an artifact directory"),
        (["run", "{dir}", "--runs", "0"], "argument --runs: expected an integer >= 1, got 0"),
        (["run", "{dir}", "--inputs", "{missing}.npz"], "argument --inputs: '{missing}.npz' does not exist"),
        (["export-triton", "{dir}", "--repo", "{file}"], "argument --repo: '{file}' is an existing file"),
        (["export-triton", "{dir}", "--repo", "{out}", "--version", "0"], "argument --version: expected an integer"),
        (["export-triton", "{dir}", "--repo", "{out}", "--name", "a/b"], "argument --name: 'a/b': expected a model"),
        (["export-triton", "{dir}", "--repo", "{out}", "--instances", "-1"], "argument --instances: expected"),
        (["bench", MODEL, "--threads", "0"], "argument --threads: expected an integer >= 1, got 0"),
        (["bench", MODEL, "--targets", "onnxruntime,nope"], "unknown target(s) ['nope']"),
        (["bench", MODEL, "--batch", "0"], "argument --batch: expected an integer >= 1, got 0"),
        (["bench", MODEL, "--min-time", "-1"], "argument --min-time: expected a number >= 0, got -1"),
        (["bench", MODEL, "--json", "{dir}"], "argument --json: '{dir}' is a directory"),
        (["compare", MODEL, "--targets", "onnxruntime", "--iou", "1.5"], "argument --iou: expected a number > 0"),
        (["compare", MODEL, "--targets", "onnxruntime", "--atol", "nan"], "argument --atol: expected a number"),
        (["compare", MODEL, "--targets", "onnxruntime", "--dynamic", "x:0:b:9:2"], "MIN 9 is not below MAX 2"),
        (["compare", MODEL, "--targets", ""], "unknown target(s) ['']"),
        (["frobnicate"], "argument COMMAND: invalid choice: 'frobnicate'"),
    ],
)
def test_other_commands_refuse_a_bad_argument_before_work(
    argv: list[str], expected: str, paths: dict[str, str], capsys: pytest.CaptureFixture[str],
) -> None:
    _assert_refused([a.format(**paths) for a in argv], expected.format(**paths), capsys)
    assert not Path(paths["out"]).exists()


def test_the_entry_point_prints_one_line_and_exits_2(paths: dict[str, str]) -> None:
    """The issue's first case, through ``python -m fxdeploy.cli`` as a user runs it."""
    result = subprocess.run(
        [sys.executable, "-m", "fxdeploy.cli", "lower", MODEL, "--out", paths["file"]], capture_output=True,
        text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"fxdeploy lower: error: argument --out: {paths['file']!r} is an existing file; expected a directory to "
        "write the artifact into (new, or an artifact to replace) (see fxdeploy lower --help)"
    ]
