"""``histc`` (``fxdeploy/lowering/onnx_translations/histc.py``) bins as torch's CPU kernel does: torch.onnx's
translation compared values with rounded edges, and a value on an interior edge (-0.8 of 10 bins over [-1, 1]) was
counted in the neighbouring bin; lower()'s check, on random inputs, never met one."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import fxdeploy
from fxdeploy.lowering.onnx_translations.histc import thresholds
from tests.helpers import require_target

RANGES = ((10, -1.0, 1.0), (7, -1.0, 2.0), (100, 0.0, 1.0), (5, 0.1, 0.7), (4, -2.0, 2.0))


class Histograms(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(torch.histc(x, bins, low, high) for bins, low, high in RANGES)


def _one_by_one(values: torch.Tensor, bins: int, low: float, high: float) -> torch.Tensor:
    """Each value's bin in eager (-1 where it is not counted)."""
    counts = torch.stack([torch.histc(v.reshape(1), bins, low, high) for v in values])
    return torch.where(counts.sum(1) > 0, counts.argmax(1), -1)


def _edge_values(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Every interior edge of every range as torch rounds it, one float step either side, the ends, zeros, NaN and
    the infinities."""
    values = [torch.tensor([0.0, -0.0, float("nan"), float("inf"), float("-inf"), -3.0, 3.0], dtype=dtype)]
    for bins, low, high in RANGES:
        edges = torch.linspace(low, high, bins + 1, dtype=dtype)
        for anchor in (edges, torch.linspace(low, high, bins + 1, dtype=torch.float64).to(dtype)):
            values += [anchor, anchor.nextafter(torch.tensor(-float("inf"), dtype=dtype)),
                       anchor.nextafter(torch.tensor(float("inf"), dtype=dtype))]
    return torch.cat(values)


def test_thresholds_are_torchs_bin_rule() -> None:
    """The thresholds bin every edge value, each neighbour and a fine grid as eager's kernel does, in float32 and
    float64 (float64's keys span more than int64: the bisection must not take their difference)."""
    for dtype in (torch.float32, torch.float64):
        grid = torch.cat([_edge_values(dtype), torch.linspace(-2.5, 2.5, 2001, dtype=dtype)])
        for bins, low, high in RANGES:
            edges = torch.linspace(low, high, bins + 1, dtype=dtype)
            counted = (thresholds(bins, edges[0], edges[-1]).unsqueeze(0) <= grid.unsqueeze(1)).sum(1)
            inside = (grid >= edges[0]) & (grid <= edges[-1])
            assert torch.equal(torch.where(inside, counted, -1), _one_by_one(grid, bins, low, high))


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_values_on_interior_edges_land_in_eagers_bins(target: str, tmp_path: Path) -> None:
    require_target(target)
    example = torch.randn(64, generator=torch.Generator().manual_seed(0))
    deployed = fxdeploy.lower(Histograms(), (example,), target=target, dynamic_shapes={"x": {0: ("n", 1, 4096)}})
    deployed.save(tmp_path / "art")
    x = _edge_values()
    assert torch.equal(_one_by_one(torch.tensor([-0.8]), 10, -1.0, 1.0), torch.tensor([0]))  # not bin 1
    loaded = fxdeploy.load(tmp_path / "art")
    for runner in (deployed, loaded):
        for got, want in zip(runner(x), Histograms()(x), strict=True):
            assert got.dtype == want.dtype and torch.equal(got, want)
    for value in x:  # one at a time: a swap between two bins cannot hide in the sums
        for got, want in zip(loaded(value.reshape(1)), Histograms()(value.reshape(1)), strict=True):
            assert torch.equal(got, want), (float(value), got, want)
