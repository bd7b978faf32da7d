"""padded_copies: a copy into the corner of a new filled buffer becomes a pad, with the same values."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

from fxdeploy.passes import op_histogram
from fxdeploy.passes.ncnn.padded_copies import padded_copies
from fxdeploy.settings import Settings

BATCH = torch.export.Dim("batch", min=1, max=8)


def exported(model: torch.nn.Module, *xs: torch.Tensor, dynamic: object = None) -> torch.fx.GraphModule:
    program = torch.export.export(model, xs, dynamic_shapes=dynamic)
    return torch.fx.GraphModule(program.graph_module, program.graph_module.graph)


def rewritten(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    result = padded_copies(gm, Settings())
    assert result.modified
    ops = op_histogram(result.graph_module)
    assert "aten.copy_.default" not in ops and "aten.new_full.default" not in ops, ops
    result.graph_module.recompile()
    return result.graph_module


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
    x = torch.randn(1, 3, 32, 32)
    gm = rewritten(exported(model, x))
    assert ("aten.constant_pad_nd.default" in op_histogram(gm)) == (padded != (16, 16))
    fresh = torch.randn(1, 3, 32, 32)
    torch.testing.assert_close(gm(fresh)[0], model(fresh), rtol=0, atol=0)


class PadInto(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        canvas = x.new_zeros((x.shape[0], 4, 32, 32))
        canvas[:, :3, :30, :28].copy_(x)
        return canvas.sum(1)


def test_a_dynamic_batch_and_a_zero_filled_canvas() -> None:
    model = PadInto()
    gm = rewritten(exported(model, torch.randn(2, 3, 30, 28), dynamic=({0: BATCH},)))
    x = torch.randn(5, 3, 30, 28)
    torch.testing.assert_close(gm(x)[0], model(x), rtol=0, atol=0)


class ReadBeforeWrite(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        canvas = x.new_full((1, 3, 8, 8), 0.5)
        before = canvas.sum()
        canvas[0, :, :4, :4].copy_(x[0])
        return before, canvas


class OneRowOfTwo(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        canvas = x.new_full((2, 3, 8, 8), 0.0)
        canvas[1, :, :4, :4].copy_(x[0])
        return canvas


class OffsetWrite(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        canvas = x.new_full((1, 3, 8, 8), 0.0)
        canvas[0, :, 2:6, :4].copy_(x[0])
        return canvas


class BroadcastWrite(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        canvas = x.new_full((1, 3, 8, 8), 0.0)
        canvas[0, :, :4, :4].copy_(x[0, :1])
        return canvas


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        (ReadBeforeWrite(), "read or written before the copy"),
        (OneRowOfTwo(), "picks one of 2 rows"),
        (OffsetWrite(), "does not start at 0"),
        (BroadcastWrite(), "the copy broadcasts [1, 4, 4] to [3, 4, 4]"),
    ],
    ids=lambda m: type(m).__name__ if isinstance(m, torch.nn.Module) else "",
)
def test_writes_that_are_not_a_corner_pad_are_left_alone_with_the_reason(
    model: torch.nn.Module, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    x = torch.randn(1, 3, 4, 4)
    gm = exported(model, x)
    with caplog.at_level(logging.DEBUG, logger="fxdeploy.passes.ncnn.padded_copies"):
        result = padded_copies(gm, Settings())
    assert not result.modified
    assert reason in caplog.text
    assert "aten.copy_.default" in op_histogram(result.graph_module)
    torch.testing.assert_close(result.graph_module(x), tuple(torch.utils._pytree.tree_leaves(model(x))))
