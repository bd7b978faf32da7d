"""The lowering report shows the real plan: on ncnn, which stages run on the host, with their ops."""

from __future__ import annotations

import torch

import fxdeploy
from examples.detector import tiny_yolo
from examples.models import convnet
from fxdeploy.report import render_report
from tests.helpers import require_target


def test_an_ncnn_plan_names_its_host_stages_and_their_ops() -> None:
    require_target("ncnn")
    model, inputs = tiny_yolo()
    deployed = fxdeploy.lower(model, inputs, target="ncnn", dynamic_shapes={"images": {0: ("batch", 1, 8)}},
                              settings=fxdeploy.Settings(verify=False))
    report = render_report(deployed)
    section = report.split("## Nodes the target could not take")[1].split("##")[0]
    assert "stages (0: engine" in section and ": host" in section, section
    assert "fxdeploy.multiclass_nms.default" in section, section  # ncnn has no NMS layer


def test_a_graph_that_runs_whole_in_the_engine_says_so() -> None:
    model, (x,) = convnet()
    with torch.no_grad():
        report = render_report(fxdeploy.lower(model, (x,), settings=fxdeploy.Settings(verify=False)))
    assert "None: the whole graph runs in the engine." in report
