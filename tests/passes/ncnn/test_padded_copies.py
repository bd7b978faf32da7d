"""padded_copies: a write into a buffer of one fill value (a scatter, functionalized) becomes a pad,
with the same values."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from fxdeploy.capture.functional import functionalize
from fxdeploy.passes import op_histogram
from fxdeploy.passes.ncnn.fold_constants import fold_constants
from fxdeploy.passes.ncnn.padded_copies import padded_copies
from fxdeploy.passes.scatters_as_slices import scatters_as_slices
from fxdeploy.settings import Settings

BATCH = torch.export.Dim("batch", min=1, max=8)
SCATTERS = ("aten.slice_scatter.default", "aten.select_scatter.default")


def functional(model: torch.nn.Module, *xs: torch.Tensor, dynamic: object = None) -> torch.fx.GraphModule:
    """The graph passes see: functionalized, constants as attributes."""
    return functionalize(torch.export.export(model, xs, dynamic_shapes=dynamic)).module(check_guards=False)


def rewritten(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """padded_copies, then scatters_as_slices for the copies it leaves (a copy is its source)."""
    result = padded_copies(gm, Settings())
    assert result.modified
    gm = scatters_as_slices(result.graph_module, Settings()).graph_module
    gm.graph.lint()
    gm.recompile()
    ops = op_histogram(gm)
    assert not {*SCATTERS, "aten.cat.default", "aten.copy.default"} & set(ops), ops
    return gm


def same(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


class BatchImages(torch.nn.Module):
    """torchvision's GeneralizedRCNNTransform at one image: resize, then pad into a new batch."""

    def __init__(self, padded: tuple[int, int], fill: float = 0.0) -> None:
        super().__init__()
        self.padded, self.fill = padded, fill

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        image = images.unbind(0)[0] * 2.0
        image = F.interpolate(image[None], scale_factor=0.5, mode="bilinear")[0]
        batched = image.new_full((1, 3, *self.padded), self.fill)
        batched[0, : image.shape[0], : image.shape[1], : image.shape[2]].copy_(image)
        return batched + 1.0


@pytest.mark.parametrize(("padded", "fill"), [((16, 16), 0.0), ((24, 32), 0.0), ((24, 32), -1.5)],
                         ids=["whole-buffer", "padded", "padded-with-fill"])
def test_torchvisions_batching_becomes_a_pad(padded: tuple[int, int], fill: float) -> None:
    model = BatchImages(padded, fill)
    gm = rewritten(functional(model, torch.randn(1, 3, 32, 32)))
    ops = op_histogram(gm)
    assert ("aten.constant_pad_nd.default" in ops) == (padded != (16, 16))
    assert "aten.new_full.default" not in ops, ops  # the buffer is unused
    fresh = torch.randn(1, 3, 32, 32)
    same(gm(fresh), model(fresh))


def test_a_small_buffer_folded_into_a_constant_is_still_a_fill() -> None:
    """fold_constants makes a small buffer's views tensor constants: each holds one value."""
    model = BatchImages((24, 32), -1.5)
    folded = fold_constants(functional(model, torch.randn(1, 3, 32, 32)), Settings())
    assert folded.modified and "aten.new_full.default" not in op_histogram(folded.graph_module)
    gm = rewritten(folded.graph_module)
    fresh = torch.randn(1, 3, 32, 32)
    same(gm(fresh), model(fresh))


class PadInto(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        canvas = x.new_zeros((x.shape[0], 4, 32, 32))
        canvas[:, :3, :30, :28].copy_(x)
        return canvas.sum(1)


def test_a_dynamic_batch_and_a_zero_filled_canvas() -> None:
    model = PadInto()
    gm = rewritten(functional(model, torch.randn(2, 3, 30, 28), dynamic=({0: BATCH},)))
    x = torch.randn(5, 3, 30, 28)
    same(gm(x), model(x))


class Canvas(torch.nn.Module):
    """A write anywhere into a filled canvas, read before and after."""

    def __init__(self, where: tuple[object, ...], fill: float, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.where, self.fill, self.dtype = where, fill, dtype

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        canvas = torch.full((2, 3, 8, 8), self.fill, dtype=self.dtype)
        before = canvas.sum()
        canvas[self.where] = x[0, :1, :4, :4]  # a broadcast copy, cast to the canvas's dtype
        return before, canvas


@settings(max_examples=20, deadline=None)
@given(row=st.integers(-2, 1), top=st.sampled_from([-8, -5, -4, 0, 3, 4]), left=st.integers(0, 4),
       fill=st.sampled_from([0.0, -0.0, 2.5, float("-inf"), float("nan")]),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.int32]))
def test_a_write_anywhere_into_a_filled_canvas_is_a_pad(row: int, top: int, left: int, fill: float,
                                                         dtype: torch.dtype) -> None:
    fill = 7 if dtype == torch.int32 else fill
    rows = slice(top, top + 4 if top != -4 else None)  # four rows, counted from the end where negative
    model = Canvas((row, slice(None), rows, slice(left, left + 4)), fill, dtype)
    x = torch.randn(1, 3, 4, 4) * 100
    gm = rewritten(functional(model, x))
    for got, want in zip(gm(x), model(x), strict=True):
        same(got, want)


class ShortOfADynamicEnd(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        canvas = x.new_zeros(x.shape)
        canvas[:, :, 1:3] = x[:, :, :2]
        return canvas


class Stepped(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        canvas = torch.zeros(1, 3, 8)
        canvas[:, :, ::2] = x
        return canvas


class NotAFill(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("canvas", torch.tensor([[[0.0] * 7 + [-0.0]] * 3]))  # 0.0 and -0.0: two values

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        canvas = self.canvas.clone()
        canvas[:, :, :4] = x
        return canvas


@pytest.mark.parametrize(
    ("model", "dynamic", "reason"),
    [
        (ShortOfADynamicEnd(), ({2: torch.export.Dim("n", min=4)},), "where the pad on either side is not known"),
        (Stepped(), None, "step 2"),
        (NotAFill(), None, "not a buffer of one fill value"),
    ],
    ids=lambda m: type(m).__name__ if isinstance(m, torch.nn.Module) else "",
)
def test_writes_that_are_not_a_pad_are_left_with_the_reason(
    model: torch.nn.Module, dynamic: object, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    x = torch.randn(1, 3, 4)
    gm = functional(model, x, dynamic=dynamic)
    with caplog.at_level(logging.DEBUG, logger="fxdeploy.passes.ncnn.padded_copies"):
        result = padded_copies(gm, Settings())
    assert reason in caplog.text
    assert set(SCATTERS) & set(op_histogram(result.graph_module))
    result.graph_module.recompile()
    same(result.graph_module(x), model(x))
