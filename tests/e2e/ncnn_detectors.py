"""Shared by the ncnn detector tests: lower with a dynamic batch, then compare with eager at batch 1 and 3."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

import fxdeploy
from tests.ops.nms_matching import assert_detections_match, padding_problems


def lower_on_ncnn(make: Callable[[], nn.Module], size: int) -> tuple[nn.Module, fxdeploy.Deployed]:
    """``make()`` under seed 0, lowered to ncnn from a batch of 2 with the batch dynamic (1 to 4)."""
    status = fxdeploy.targets()["ncnn"]
    if not status.available:
        pytest.skip(f"ncnn: {status.reason}")
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
