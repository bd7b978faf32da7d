"""The lowering report shows the real plan: on ncnn, which stages run on the host, with their ops."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

import fxdeploy
from examples.detector import tiny_yolo
from examples.models import convnet
from fxdeploy.cli.report import render_report
from tests.helpers import ROOT, require_target


def test_an_ncnn_plan_names_its_host_stages_and_their_ops() -> None:
    require_target("ncnn")
    model, inputs = tiny_yolo()
    deployed = fxdeploy.lower(model, inputs, target="ncnn", dynamic_shapes={"images": {0: ("batch", 1, 8)}})
    report = render_report(deployed)
    section = report.split("## Nodes the target could not take")[1].split("##")[0]
    assert "stages (0: engine" in section and ": host" in section, section
    assert "fxdeploy.multiclass_nms.default" in section, section  # ncnn has no NMS layer


def test_a_graph_that_runs_whole_in_the_engine_says_so() -> None:
    model, (x,) = convnet()
    with torch.no_grad():
        deployed = fxdeploy.lower(model, (x,))
    report = render_report(deployed)
    assert "None: the whole graph runs in the engine." in report
    assert "| example | [[2, 3, 64, 64]] |" in report and "| none |" in report  # checked, nothing excused


def test_the_report_counts_each_excuse_of_the_check() -> None:
    """docs/checking.md: each excuse lower()'s check used is counted in the manifest and the report."""
    model, (x,) = convnet()
    deployed = fxdeploy.lower(model, (x,))
    deployed.manifest["info"]["shape_checks"][0]["excused"] = {"iou_threshold": 2, "tie": 1}
    deployed.manifest["info"]["original_check"] = {"shapes": [[2, 3, 64, 64]], "excused": {"score_threshold": 1}}
    report = render_report(deployed)
    assert "iou_threshold 2, tie 1 |" in report
    assert "| the model without substitutions | [[2, 3, 64, 64]] | paired | score_threshold 1 |" in report
    deployed.manifest["info"]["verified"] = False
    assert "Not checked: lowered with verify=False." in render_report(deployed)


def test_the_cli_report_lists_each_ncnn_stage_and_why_each_host_op_is_there(tmp_path: Path) -> None:
    """``fxdeploy lower ... --target ncnn --report r.md`` on the zoo's RT-DETR (transformers, its
    processor's postprocess substituted; a dynamic batch runs image by image): encoder, query
    selection by top-k and gather on the host, decoder, NMS on the host. Four stages, each host op
    with its reason, and lower()'s own check against eager passed at batch 1 and 2 (the engine runs
    once per image, so larger batches check nothing more: ``parity/lower_check.py``), and on the
    model without its substitutions."""
    require_target("ncnn")
    report = tmp_path / "r.md"
    ran = subprocess.run(
        [sys.executable, "-m", "fxdeploy.cli", "lower", "examples.zoo:rt_detr_small", "--target", "ncnn",
         "--dynamic", "pixel_values:0:batch:1:4", "--out", str(tmp_path / "art"), "--report", str(report)],
        capture_output=True, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=600,
    )
    assert ran.returncode == 0, ran.stderr
    section = report.read_text().split("## Nodes the target could not take")[1].split("\n## ")[0]
    stages = [line for line in section.splitlines() if line.startswith("- stage ")]
    assert [line.split(":")[1].split()[0] for line in stages] == ["engine", "host", "engine", "host"], section
    assert "engine `model.ncnn.param`" in stages[0] and "engine `model.2.ncnn.param`" in stages[2]
    selection, postprocess = (_host_ops(section, f"- stage {k}:") for k in (1, 3))
    assert selection["aten.topk.default"].startswith("ncnn has no top-k"), selection
    assert selection["aten.gather.default"].startswith("ncnn has no gather"), selection
    assert postprocess["fxdeploy.multiclass_nms.default"] == "ncnn has no NMS layer", postprocess
    assert "fxdeploy.multiclass_nms.default" not in selection and "aten.topk.default" not in postprocess
    assert all(why for why in [*selection.values(), *postprocess.values()])
    checks = report.read_text().split("## Shape checks against eager")[1]
    assert [row.split("|")[1].strip() for row in checks.splitlines() if row.startswith("| ")][1:] == [
        "example", "min", "opt", "the model without substitutions"
    ], checks


def _host_ops(section: str, stage: str) -> dict[str, str]:
    """``op -> why`` from the bullets under one stage's line."""
    lines = section.split(stage)[1].splitlines()[1:]
    bullets = [line for line in lines[: next((i for i, x in enumerate(lines) if x.startswith("- ")), len(lines))]
               if line.startswith("  - `")]
    return dict(line.removeprefix("  - `").split("`: ", 1) for line in bullets)
