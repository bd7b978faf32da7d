"""Where ncnn's engine gives other values than PyTorch, the lowering bisects the stage to the first
op that does, runs that op on the host, and says so; the artifact then matches eager."""

from __future__ import annotations

import re

import torch
from torch import nn

import fxdeploy
from fxdeploy.lowering.ncnn_bisect import DIFFERS, prefix
from tests.helpers import require_target


class Volume(nn.Module):
    """A 3-D conv, a trilinear upsampling (ncnn's Interp of a volume differs from PyTorch's), a conv."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.down, self.up = nn.Conv3d(2, 4, 3, padding=1), nn.Conv3d(4, 2, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.down(x))
        return self.up(nn.functional.interpolate(y, scale_factor=2, mode="trilinear", align_corners=False))


def test_the_op_ncnn_gets_wrong_runs_on_the_host_and_is_named() -> None:
    require_target("ncnn")
    model = Volume().eval()
    deployed = fxdeploy.lower(model, (torch.randn(2, 2, 4, 6, 6),), target="ncnn",
                              dynamic_shapes={"x": {0: ("batch", 1, 4)}})
    moved = deployed.manifest["info"]["unconverted_on_host"]["ops"]
    assert list(moved) == ["upsample_trilinear3d"], moved
    why = moved["upsample_trilinear3d"]
    assert why.startswith(DIFFERS) and "test_ncnn_bisect.py" in why, why  # the op and its source line
    assert re.search(r"ncnn layer Interp \S+", why), why  # and the layer that gave its value
    kinds = [stage["kind"] for stage in deployed.manifest["info"]["ncnn"]["stages"]]
    assert kinds == ["engine", "host", "engine"], kinds
    for batch in (1, 3):
        x = torch.randn(batch, 2, 4, 6, 6)
        with torch.no_grad():
            torch.testing.assert_close(deployed(x), model(x), rtol=1e-4, atol=1e-4)


def test_a_prefix_is_the_stage_up_to_the_op_and_takes_only_the_inputs_it_reads() -> None:
    class Two(nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return (x.relu() * 2).sin() + y

    gm = torch.fx.symbolic_trace(Two())
    doubled = next(n for n in gm.graph.nodes if n.target is torch.mul or "mul" in str(n.target))
    part, kept = prefix(gm, doubled)
    assert kept == [0]
    x = torch.randn(3)
    torch.testing.assert_close(part(x)[0], x.relu() * 2)
