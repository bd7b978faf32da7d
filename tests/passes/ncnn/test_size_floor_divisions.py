"""size_floor_divisions: a size's ``//`` of a dividend that can be negative (``-(-h // 4)``, the
ceiling of ``h / 4``) divides a non-negative one, where ncnn's truncation is Python's floor."""

from __future__ import annotations

import operator

import torch

from fxdeploy.passes.ncnn.size_floor_divisions import check, size_floor_divisions
from fxdeploy.passes.remove_asserts import remove_asserts
from fxdeploy.settings import Settings
from tests.helpers import require_target
from tests.passes.graphs import applied

H = torch.export.Dim("h", min=64, max=256)
SIZES = (64, 65, 66, 67, 97, 131, 255, 256)  # the odd ones are where truncation and the floor differ


class CeilingRows(torch.nn.Module):
    """The last ceil(h / 4) rows, and the rows before the ceiling of h over a size read elsewhere."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x.shape[2]
        return x[:, :, -(-h // 4):], x[:, :, : -(-h // y.shape[0]) + 1]


class FloorRows(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :, : x.shape[2] // 3]


def _graph(model: torch.nn.Module, *args: torch.Tensor, shapes: object) -> torch.fx.GraphModule:
    program = torch.export.export(model, args, dynamic_shapes=shapes, prefer_deferred_runtime_asserts_over_guards=True)
    return remove_asserts(program.module(check_guards=False), Settings()).graph_module


def _divisions(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is operator.floordiv]


def test_a_negative_dividend_is_shifted_and_the_rows_are_eagers_at_every_size() -> None:
    model, y = CeilingRows(), torch.zeros(4)
    shapes = ({2: H}, {0: torch.export.Dim("n", min=2, max=8)})
    gm = _graph(model, torch.randn(1, 1, 128, 2), y, shapes=shapes)
    assert [check(n) for n in _divisions(gm)] == [None, None]
    gm = applied(size_floor_divisions, gm)
    assert all("never negative" in check(n) for n in _divisions(gm))
    for h in SIZES:
        for n in (2, 3, 8):
            x, y = torch.randn(1, 1, h, 2), torch.zeros(n)
            for got, want in zip(gm(x, y), model(x, y), strict=True):
                assert torch.equal(got, want), (h, n, tuple(got.shape), tuple(want.shape))


def test_a_dividend_never_negative_stays() -> None:
    gm = _graph(FloorRows(), torch.randn(1, 1, 128, 2), shapes=({2: H},))
    assert "never negative" in check(_divisions(gm)[0])
    assert not size_floor_divisions(gm, Settings()).modified


def test_only_a_sizes_division_is_taken() -> None:
    graph = torch.fx.Graph()
    a = graph.placeholder("a")
    division = graph.call_function(operator.floordiv, (a, 4))
    division.meta["val"] = torch.tensor(3)
    assert check(division) == "not a symbolic int (a tensor's // is aten.floor_divide or aten.div)"
    assert check(a) == "not a size's //"


class Ceiling(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :, -(-x.shape[2] // 4):] * 2


def test_the_ceiling_of_a_dynamic_height_is_eagers_on_ncnn() -> None:
    """lower()'s check runs the example, min, opt and max heights, every one a multiple of 4: the
    artifact sliced one row more than eager at 65, 97 or 255."""
    require_target("ncnn")
    import fxdeploy

    model = Ceiling()
    deployed = fxdeploy.lower(model, (torch.randn(1, 1, 128, 8),), target="ncnn",
                              dynamic_shapes={"x": {2: ("h", 64, 256)}})
    for h in (65, 97, 255):
        x = torch.randn(1, 1, h, 8)
        torch.testing.assert_close(deployed(x), model(x), rtol=0, atol=0)
