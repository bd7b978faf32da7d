"""torch.jit.trace (what pnnx converts) keeps sizes read at run time: traceable_sizes respells the
aten calls that take a symbolic size, so the trace follows the input's size instead of the one it
was traced at."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fxdeploy.capture import capture
from fxdeploy.lowering.torchscript import trace_graph


class SizesWrittenIntoATensor(nn.Module):
    """RT-DETR writes each feature map's height and width into a tensor (``spatial_shapes[l, 0] =
    height``), which torch.export records as ``aten.scalar_tensor`` of a size copied into a select."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shapes = torch.zeros(2, dtype=torch.int64)
        shapes[0] = x.shape[-2]
        shapes[1] = x.shape[-1]
        return x * shapes.prod() + shapes.sum()


class SizeDivides(nn.Module):
    """A size made into a float tensor (``scalar_tensor`` with its default dtype)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = torch.ops.aten.scalar_tensor.default(x.shape[-1])
        return x / scale


class SlicedBySizes(nn.Module):
    """RT-DETR's decoder takes each level's rows of the flattened maps, ``memory[:, start : start +
    height * width]``: ``aten.slice`` with bounds computed from sizes."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.flatten(2).transpose(1, 2)  # [B, H * W, C]
        half = x.shape[-2] // 2 * x.shape[-1]
        return rows[:, :half].sum(1) - rows[:, half : 2 * half].mean(1)


CASES = {
    SizesWrittenIntoATensor: torch.ops.aten.scalar_tensor.default,
    SizeDivides: torch.ops.aten.scalar_tensor.default,
    SlicedBySizes: torch.ops.aten.slice.Tensor,
}
"""The aten op each model is captured with, which traceable_sizes must respell."""


@pytest.mark.parametrize("model", [SizesWrittenIntoATensor(), SizeDivides(), SlicedBySizes()], ids=type)
def test_trace_follows_the_input_size(model: nn.Module) -> None:
    x = torch.randn(1, 3, 8, 16)
    dims = {"x": {2: ("height", 4, 64), 3: ("width", 4, 64)}}
    gm = capture(model, (x,), dynamic_shapes=dims).graph_module
    assert any(n.target is CASES[type(model)] for n in gm.graph.nodes)
    traced = trace_graph(gm, [x], target="test")
    for shape in [(1, 3, 8, 16), (1, 3, 20, 12)]:
        other = torch.randn(shape)
        (got,) = traced(other)
        torch.testing.assert_close(got, model(other), rtol=0, atol=1e-5)
