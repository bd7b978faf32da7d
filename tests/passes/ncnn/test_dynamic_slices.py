"""dynamic_slices: a slice along a dynamic dim to its end (``x[..., 1:]``) or to a negative end
(``x[..., :-1]``) reads the dim's size for its end. pnnx saw the slice's input and output shapes
equal (``(1, 6, 8, ?)``), dropped it as a no-op, and the engine gave the unsliced tensor: lower()
refused a difference of neighbours at a dynamic width. pnnx also left every ``narrow``."""

from __future__ import annotations

import torch

from fxdeploy.passes.ncnn.dynamic_slices import check, dynamic_slices
from fxdeploy.passes.remove_asserts import remove_asserts
from fxdeploy.settings import Settings
from tests.passes.graphs import applied
from tests.passes.ncnn.on_engine import assert_eagers_on_ncnn

aten = torch.ops.aten
SHAPES = {"x": {0: ("batch", 1, 4), 2: ("h", 8, 64), 3: ("w", 8, 64)}}
SIZES = ((1, 8, 8), (3, 13, 9), (2, 64, 37), (1, 11, 64))


class Neighbours(torch.nn.Module):
    """Differences of neighbours along the width and the height, an inner crop, a narrow of the
    width's length less two, and a narrow of a fixed length."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        dx = x[..., 1:] - x[..., :-1]
        dy = x[:, :, 1:] - x[:, :, :-1]
        inner = x[:, :, 2:-3, 1:-1] * 2.0
        return dx, dy, inner, x.narrow(3, 1, x.shape[3] - 2) + 1.0, x.narrow(2, 2, 3) * 3.0


def _graph(model: torch.nn.Module) -> torch.fx.GraphModule:
    dims = {d: torch.export.Dim(name, min=low, max=high) for d, (name, low, high) in SHAPES["x"].items()}
    program = torch.export.export(model, (torch.randn(2, 3, 16, 16),), dynamic_shapes={"x": dims})
    return remove_asserts(program.module(check_guards=False), Settings()).graph_module


def _slices(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    ops = (aten.slice.Tensor, aten.narrow.default)
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target in ops]


def test_each_open_or_negative_end_reads_the_size_and_the_values_are_eagers() -> None:
    gm = _graph(Neighbours())
    before = [check(n) for n in _slices(gm)]
    assert before.count(None) == 8 and not [n for n in _slices(gm) if n.target is aten.narrow.default and check(n)]
    gm = applied(dynamic_slices, gm)
    assert not [n for n in gm.graph.nodes if n.target is aten.narrow.default]
    ends = [n.args[3] for n in _slices(gm) if check(n) is None]
    assert not ends, f"slices left with a number end: {ends}"
    for batch, h, w in SIZES:
        x = torch.randn(batch, 3, h, w)
        for got, want in zip(gm(x), Neighbours()(x), strict=True):
            assert torch.equal(got, want), (batch, h, w)


def test_a_slice_of_a_static_size_or_dim_stays() -> None:
    class Fixed(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return x[..., 2:5] + 1.0, x[:, 1:] * 2.0

    gm = _graph(Fixed())
    reasons = {str(check(n)) for n in _slices(gm)}
    assert reasons == {"it slices a static dim, or to a static size (pnnx keeps it)"}


def test_neighbours_at_a_dynamic_size_are_eagers_on_ncnn() -> None:
    assert_eagers_on_ncnn(Neighbours(), torch.randn(2, 3, 16, 16), SHAPES, SIZES)
