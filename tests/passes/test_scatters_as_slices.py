"""scatters_as_slices: functional writes (copy, fill, slice_scatter, select_scatter) become slices
and a cat, with the same values."""

from __future__ import annotations

import logging

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fxdeploy.capture.functional import functionalize
from fxdeploy.passes import op_histogram
from fxdeploy.passes.scatters_as_slices import scatters_as_slices
from fxdeploy.settings import Settings

BATCH = torch.export.Dim("batch", min=1, max=8)
WRITES = ("aten.copy.default", "aten.fill.Scalar", "aten.fill.Tensor", "aten.slice_scatter.default",
          "aten.select_scatter.default")
BOUNDS = st.one_of(st.none(), st.integers(-9, 9))


def functional(model: torch.nn.Module, *xs: torch.Tensor, dynamic: object = None) -> torch.fx.GraphModule:
    """The graph passes see: functionalized, constants (a lifted ``0``) as attributes."""
    return functionalize(torch.export.export(model, xs, dynamic_shapes=dynamic)).module(check_guards=False)


def rewritten(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    result = scatters_as_slices(gm, Settings())
    assert result.modified
    result.graph_module.graph.lint()
    result.graph_module.recompile()
    ops = op_histogram(result.graph_module)
    assert not set(WRITES) & set(ops), ops
    return result.graph_module


def same(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


class Writes(torch.nn.Module):
    """Each kind of write: a fill, a copy of another row, an in-place op on a range, a cast copy
    into the last column (from the end), a broadcast copy."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y[:, 0] = 0
        y[:, 1] = x[:, 2] * 2
        y[:, 2:4] *= 3
        y[..., -1] = x[:, :, 0].to(torch.int64)
        y[:, 4, 1:3] = x[:, :1, 0]
        return y


def test_every_kind_of_write_becomes_slices_and_a_cat_with_the_same_values() -> None:
    model = Writes()
    gm = rewritten(functional(model, torch.randn(2, 5, 6)))
    assert op_histogram(gm)["aten.cat.default"] >= 4
    x = torch.randn(2, 5, 6) * 1e3
    # edge values move as they are
    x[0, 2, 3], x[1, 3, 0], x[0, 1, 1], x[1, 4, 2] = float("nan"), float("inf"), -0.0, 1e-42
    same(gm(x), model(x))


class BoxCorners(torch.nn.Module):
    """Ultralytics' xywh2xyxy: a new buffer written piece by piece."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        xy, wh = x[..., :2], x[..., 2:] / 2
        y[..., :2] = xy - wh
        y[..., 2:] = xy + wh
        return y


def test_a_buffer_written_all_over_becomes_one_cat_of_the_pieces() -> None:
    model = BoxCorners()
    gm = rewritten(functional(model, torch.randn(2, 7, 4), dynamic=({0: BATCH, 1: torch.export.Dim("n")},)))
    ops = op_histogram(gm)
    assert ops["aten.cat.default"] == 1 and "aten.empty_like.default" not in ops, ops
    x = torch.randn(3, 11, 4)
    same(gm(x), model(x))


class Written(torch.nn.Module):
    def __init__(self, dim: int, index: slice | int) -> None:
        super().__init__()
        self.where = (slice(None),) * dim + (index,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y[self.where] = y[self.where] * 2 + 1
        return y


@settings(max_examples=30, deadline=None)
@given(size=st.integers(1, 7), dim=st.sampled_from([1, 2]), start=BOUNDS, end=BOUNDS, select=st.booleans(),
       batch=st.integers(1, 3))
def test_any_slice_or_row_written_keeps_every_element(
    size: int, dim: int, start: int | None, end: int | None, select: bool, batch: int
) -> None:
    index: slice | int = slice(start, end) if not select else min(max(start or 0, -size), size - 1)
    shape = [2, size, 3] if dim == 1 else [2, 3, size]
    model = Written(dim, index)
    gm = rewritten(functional(model, torch.randn(*shape), dynamic=({0: BATCH},)))
    x = torch.randn(batch, *shape[1:])
    same(gm(x), model(x))


@pytest.mark.parametrize("index", [-1, -2, 0, slice(1, None), slice(-3, None), slice(1, 3)],
                         ids=["last", "second-last", "first", "to-the-end", "last-three", "two-rows"])
def test_writes_into_a_dynamic_dim(index: slice | int) -> None:
    model = Written(1, index)
    gm = rewritten(functional(model, torch.randn(2, 6, 3), dynamic=({0: BATCH, 1: torch.export.Dim("n", min=4)},)))
    for rows in (4, 9):
        x = torch.randn(3, rows, 3)
        same(gm(x), model(x))


class Every2nd(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y[:, ::2] = 0.5
        return y


class UpToHalf(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y[:, : x.shape[1] // 2] *= 2
        return y


@pytest.mark.parametrize(
    ("model", "dynamic", "reason"),
    [
        (Every2nd(), None, "step 2"),
        (UpToHalf(), ({1: torch.export.Dim.DYNAMIC},), "is not a constant"),
    ],
    ids=["stepped", "computed-end"],
)
def test_scatters_no_slice_spells_stay_with_the_reason(
    model: torch.nn.Module, dynamic: object, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    x = torch.randn(2, 6)
    gm = functional(model, x, dynamic=dynamic)
    with caplog.at_level(logging.DEBUG, logger="fxdeploy.passes.scatters_as_slices"):
        result = scatters_as_slices(gm, Settings())
    assert reason in caplog.text
    assert "aten.slice_scatter.default" in op_histogram(result.graph_module)
    result.graph_module.recompile()
    same(result.graph_module(x), model(x))


class FlatWrites(torch.nn.Module):
    """Writes into a flattened batch: at the batch's smallest size (2) the row 23 is the last one,
    so the rows after it are none there and some at any larger batch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.view(-1)
        y = flat.clone()
        y[22] = flat[21]
        y[23] = flat[0] * 2
        return y


def test_a_1d_write_whose_rows_beside_it_may_be_none_keeps_the_dim_dynamic(caplog: pytest.LogCaptureFixture) -> None:
    """A cat of 1-D pieces reads whether a piece is empty (a guard): spelled as one, the write at 23
    fixed the batch at the example's for every later pass, which then wrote a 24-element result."""
    model = FlatWrites()
    gm = functional(model, torch.randn(2, 2, 3, 2), dynamic=({0: BATCH},))
    with caplog.at_level(logging.DEBUG, logger="fxdeploy.passes.scatters_as_slices"):
        result = scatters_as_slices(gm, Settings())
    assert "rows beside it may be none" in caplog.text
    assert result.modified  # the write at 22 has rows after it at every batch: a cat
    result.graph_module.recompile()
    for batch in (2, 3, 8):
        x = torch.randn(batch, 2, 3, 2)
        same(result.graph_module(x), model(x))
