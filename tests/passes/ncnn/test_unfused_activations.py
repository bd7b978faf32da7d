"""unfused_activations: ``F.softsign``, ``F.tanhshrink`` and ``F.softmin`` are exported as their
formulas, which pnnx fused back into one ``F.softsign`` / ``F.tanhshrink`` / ``F.softmin`` layer that
ncnn has no layer for, with no graph node behind it for the host fallback: lower() refused a model
with any of them. Respelled with an operation pnnx's patterns do not name, bit for bit."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fxdeploy.passes.ncnn.unfused_activations import check, unfused_activations
from tests.passes.graphs import applied
from tests.passes.ncnn.on_engine import assert_eagers_on_ncnn


class Formulas(torch.nn.Module):
    def forward(self, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return F.softsign(y), F.tanhshrink(y) * 2.0, F.softmin(y, 1), y / (y.abs() + 2.0)


class Activations(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return Formulas()(self.conv(x) * 3.0)


def test_each_fused_pattern_is_respelled_bit_for_bit() -> None:
    model = Formulas()
    gm = torch.export.export(model, (torch.randn(2, 4, 9, 7),)).module()
    assert sorted(str(check(n)) for n in gm.graph.nodes if check(n)) == ["softmin", "softsign", "tanhshrink"]
    gm = applied(unfused_activations, gm)
    assert not [n for n in gm.graph.nodes if check(n)]
    x = torch.randn(2, 4, 9, 7) * 10
    special = [[0.0, -0.0, float("inf")], [float("-inf"), float("nan"), 1e-30], [-1e30, 3.0, -3.0]]
    x[0, 0, :3, :3] = torch.tensor(special)
    with torch.no_grad():
        for got, want in zip(gm(x), model(x), strict=True):
            assert torch.equal(got.isnan(), want.isnan())
            numbers = ~want.isnan()  # a NaN's sign is IEEE's to choose
            assert torch.equal(got[numbers], want[numbers])
            assert torch.equal(got[numbers].signbit(), want[numbers].signbit())


def test_the_activations_run_on_ncnns_engine() -> None:
    shapes = {"x": {0: ("batch", 1, 4), 2: ("h", 8, 32), 3: ("w", 8, 32)}}
    sizes = ((1, 8, 8), (3, 13, 11), (2, 32, 9))
    assert_eagers_on_ncnn(Activations(), torch.randn(2, 4, 16, 16), shapes, sizes, rtol=1e-4, atol=1e-5)
