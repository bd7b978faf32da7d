"""Ops pnnx leaves unconverted run on the host, and the report says which, where and why.

- a masked write ``y[y.abs() > 1] = 0`` (``torch.gt``, ``Tensor.index_put``) and a comparison
  of two unbounded values read as a float mask (``torch.eq``, ``aten::_to_copy``): pnnx has no ncnn
  layer for any of them;
- ``torch.erfinv`` (``aten::erfinv``);
- a stepped write ``y[:, :, ::2] = ...``, which pnnx does convert, to ncnn's CopyTo, which ignores
  the step: the cut puts it on the host from the start.

Each lowers on ncnn with those ops in a host stage between two engine stages, matches eager, and
past ``Settings.ncnn.max_host_ops`` the lowering refuses, naming the setting.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import fxdeploy
from fxdeploy.cli.report import render_report
from fxdeploy.targets.sections import NcnnSettings
from tests.helpers import require_target


class MaskedPeaks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.head = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        y[y.abs() > 1] = 0.0  # THE WRITE
        keep = (y == y.amax(1, keepdim=True)).float()  # THE PEAKS
        return self.head(y * keep)


class InverseErf(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.head = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.erfinv(torch.tanh(self.conv(x)) * 0.5))  # THE ERFINV


class SteppedWrite(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.head = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        y[:, :, ::2] = y[:, :, ::2] * 0.5
        return self.head(y)


def line_of(mark: str) -> str:
    """``File "<this file>", line N``: where the model's line that carries ``mark`` is."""
    number = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if text.endswith(mark))
    return f'File "{__file__}", line {number}'


def lowered(model: nn.Module, settings: fxdeploy.Settings | None = None) -> fxdeploy.Deployed:
    require_target("ncnn")
    torch.manual_seed(0)
    return fxdeploy.lower(model.eval(), (torch.randn(2, 3, 8, 8),), target="ncnn",
                          dynamic_shapes={"x": {0: ("batch", 1, 4)}}, settings=settings)


def assert_matches_eager(model: nn.Module, deployed: fxdeploy.Deployed) -> None:
    generator = torch.Generator().manual_seed(1)
    for batch in (1, 3):
        x = torch.randn(batch, 3, 8, 8, generator=generator)
        with torch.no_grad():
            want = model(x)
        torch.testing.assert_close(deployed(x), want, rtol=1e-4, atol=1e-4)


def host_section(deployed: fxdeploy.Deployed) -> str:
    return render_report(deployed).split("## Nodes the target could not take")[1].split("\n## ")[0]


@pytest.mark.parametrize(
    ("model", "moved"),
    [
        (MaskedPeaks(), {"torch.gt": "# THE WRITE", "Tensor.index_put": "# THE WRITE",
                         "torch.eq": "# THE PEAKS", "aten::_to_copy": "# THE PEAKS"}),
        (InverseErf(), {"aten::erfinv": "# THE ERFINV"}),
    ],
    ids=["masked-write-and-unbounded-peaks", "erfinv"],
)
def test_unconverted_ops_run_on_the_host_and_the_report_names_each(model: nn.Module, moved: dict[str, str]) -> None:
    deployed = lowered(model)
    stages = [stage["kind"] for stage in deployed.manifest["info"]["ncnn"]["stages"]]
    assert stages == ["engine", "host", "engine"]
    assert_matches_eager(model, deployed)
    section = host_section(deployed)
    said = f"{len(moved)} node(s) run on the host because pnnx left their ops unconverted or ncnn gave other values"
    assert f"{said} (at most 8" in section
    for kind, mark in moved.items():
        assert f"pnnx has no ncnn layer for {kind} ({line_of(mark)}, in forward)" in section, section


def test_a_stepped_write_runs_on_the_host() -> None:
    """pnnx's CopyTo would write every row, not every second one: lower()'s check caught that
    before the cut knew to put the write on the host."""
    model = SteppedWrite()
    deployed = lowered(model)
    assert_matches_eager(model, deployed)
    why = "pnnx writes a stepped slice_scatter as ncnn's CopyTo"
    assert f"`aten.slice_scatter.default`: {why}" in host_section(deployed)


@pytest.mark.parametrize("limit", [0, 3])
def test_more_host_ops_than_the_limit_are_refused_naming_the_setting(limit: int) -> None:
    settings = fxdeploy.Settings().with_sections(ncnn=NcnnSettings(max_host_ops=limit))
    with pytest.raises(fxdeploy.LoweringError) as info:
        lowered(MaskedPeaks(), settings)
    message = str(info.value)
    assert "pnnx left op(s) that ncnn cannot run" in message and "Tensor.index_put" in message
    assert f"more than Settings.ncnn.max_host_ops ({limit})" in message and "--ncnn-max-host-ops" in message
