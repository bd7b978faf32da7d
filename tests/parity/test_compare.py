"""``fxdeploy compare``: exit 0 on parity, 1 on a mismatch (with a readable report), 2 on misuse."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
import torch

from fxdeploy.cli.bench import run_compare
from fxdeploy.cli.main import _parser, main
from tests.helpers import ROOT

pytestmark = pytest.mark.skipif(
    not __import__("fxdeploy").targets()["onnxruntime"].available, reason="onnxruntime is not available here"
)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fxdeploy.cli", *args], capture_output=True, text=True, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}, timeout=300,
    )


def test_compare_passes_with_exit_0() -> None:
    result = _cli("compare", "examples/models.py:convnet", "--targets", "onnxruntime")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "onnxruntime: PASS" in result.stdout
    assert "result: PASS (1/1 targets pass)" in result.stdout


def test_perturbed_target_fails_with_exit_1_and_a_readable_report(capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(["compare", "examples/models.py:convnet", "--targets", "onnxruntime"])
    assert isinstance(args, argparse.Namespace)

    def perturb(output: torch.Tensor) -> torch.Tensor:
        return output + 0.5 * (torch.arange(output.shape[-1]) == 3)

    code = run_compare(args, transform={"onnxruntime": perturb})
    report = capsys.readouterr().out
    assert code == 1, report
    assert "onnxruntime: FAIL  max abs 0.5" in report
    assert "FAIL output [tensor] max abs 0.5 - 2 of 20 values outside atol 0.0001 + rtol 0.001" in report
    assert report.rstrip().endswith("result: FAIL (0/1 targets pass)")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("examples/models.py:convnet", "--targets", "no_such_target"), "unknown target(s) ['no_such_target']"),
        (("examples/models.py:nope", "--targets", "onnxruntime"), "has no factory named 'nope'"),
    ],
)
def test_usage_errors_exit_2(args: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", *args]) == 2
    assert message in capsys.readouterr().err


def test_missing_targets_flag_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", "examples/models.py:convnet"])
    assert exit_info.value.code == 2 and "--targets" in capsys.readouterr().err


def test_compare_at_several_batches_lowers_once_with_a_dynamic_batch() -> None:
    """``--batch 1 3``: the example's rows cycled to each size, every result named by its batch."""
    result = _cli("compare", "examples/models.py:convnet", "--targets", "onnxruntime", "--batch", "1", "3")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "at batch 1, 3 against eager PyTorch" in result.stdout
    assert "ok   output @ batch 1 [tensor]" in result.stdout and "ok   output @ batch 3 [tensor]" in result.stdout


def test_compare_at_batches_reports_the_batch_that_differs(capsys: pytest.CaptureFixture[str]) -> None:
    """A fault from the second image on (one box dropped from each) fails at batch 3, not at batch 1."""
    args = _parser().parse_args(["compare", "examples/detector.py:tiny_yolo", "--targets", "onnxruntime",
                                 "--batch", "1", "3"])

    def drop_last_image_box(output: list) -> list:
        return [output[0], *({**image, **{k: v[:-1] for k, v in image.items()}} for image in output[1:])]

    code = run_compare(args, transform={"onnxruntime": drop_last_image_box})
    report = capsys.readouterr().out
    assert code == 1, report
    assert "ok   output @ batch 1 [detections]" in report
    assert "FAIL output @ batch 3 [detections]" in report and "2 missing, 0 extra over 3 image(s)" in report


@pytest.mark.parametrize("batch", ["0", "-2"])
def test_compare_refuses_a_batch_below_one(batch: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "examples/models.py:convnet", "--targets", "onnxruntime", "--batch", batch]) == 2
    assert f"batch: expected an integer >= 1, got {batch}" in capsys.readouterr().err
