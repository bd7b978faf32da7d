"""Shared by the ncnn detector tests: lower with a dynamic batch, then compare with eager at batch 1 and 3."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import fxdeploy
from fxdeploy.partition.cut import SplitParts
from tests.detections import assert_detections_match, padding_problems
from tests.helpers import require_target


def lower_on_ncnn(make: Callable[[], nn.Module], size: int) -> tuple[nn.Module, fxdeploy.Deployed]:
    """``make()`` under seed 0, lowered to ncnn from a batch of 2 with the batch dynamic (1 to 4)."""
    require_target("ncnn")
    torch.manual_seed(0)
    model = make().eval()
    x = torch.randn(2, 3, size, size)
    return model, fxdeploy.lower(model, (x,), target="ncnn", dynamic_shapes={"x": {0: ("batch", 1, 4)}})


def assert_matches_eager(model: nn.Module, deployed: fxdeploy.Deployed, size: int, score_atol: float) -> None:
    """Fresh images at batch 1 and 3, with detections to compare (not only padding)."""
    generator = torch.Generator().manual_seed(1)
    for batch in (1, 3):
        x = torch.randn(batch, 3, size, size, generator=generator)
        with torch.no_grad():
            want = model(x)
        got = deployed(x)
        assert int(want[3].sum()) > batch
        assert_detections_match(want, got, score_atol=score_atol)
        assert not padding_problems(got)


def ncnn_stages(
    model: nn.Module, x: torch.Tensor, dynamic_shapes: Any = None
) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule, SplitParts]:
    """``model`` captured and run through the ncnn pass pipeline, without lowering: the captured
    graph (a copy), the passed graph, and its stages."""
    from fxdeploy.capture import capture
    from fxdeploy.partition.cut import split_parts
    from fxdeploy.passes.base import run_pipeline
    from fxdeploy.passes.record import update
    from fxdeploy.targets import get_target

    settings = fxdeploy.Settings()
    captured = capture(model.eval(), (x,), dynamic_shapes=dynamic_shapes, settings=settings)
    gm = captured.graph_module
    update(gm, output_names=tuple(captured.output_names))
    reference = copy.deepcopy(gm)
    gm, _ = run_pipeline(gm, get_target("ncnn").pipeline, settings)
    parts = split_parts(gm)
    assert parts is not None, "host_postprocess_split did not fire"
    return reference, gm, parts
