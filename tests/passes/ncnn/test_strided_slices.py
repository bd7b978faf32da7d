"""strided_slices: a stepped slice becomes a contiguous slice, a reshape and a select, same elements."""

from __future__ import annotations

import logging

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fxdeploy.passes import op_histogram
from fxdeploy.passes.ncnn.strided_slices import strided_slices
from fxdeploy.settings import Settings

BATCH = torch.export.Dim("batch", min=1, max=8)
BOUNDS = st.one_of(st.none(), st.integers(-10, 10))


class Sliced(torch.nn.Module):
    def __init__(self, dim: int, index: slice) -> None:
        super().__init__()
        self.dim, self.index = dim, index

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[(slice(None),) * self.dim + (self.index,)] + 1.0


def exported(model: torch.nn.Module, x: torch.Tensor, dynamic: dict[int, object] | None = None) -> torch.fx.GraphModule:
    program = torch.export.export(model, (x,), dynamic_shapes={"x": dynamic or {0: BATCH}})
    return torch.fx.GraphModule(program.graph_module, program.graph_module.graph)


def stepped(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    slices = [n for n in gm.graph.nodes if n.target is torch.ops.aten.slice.Tensor]
    return [n for n in slices if len(n.args) > 4 and n.args[4] != 1]


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(1, 9), dim=st.sampled_from([1, 2, -1]), start=BOUNDS, end=BOUNDS, step=st.integers(2, 6),
    batch=st.integers(1, 3),
)
def test_the_rewrite_keeps_every_element(size: int, dim: int, start: int | None, end: int | None, step: int,
                                         batch: int) -> None:
    index = slice(start, end, step)
    shape = [2, 3, size] if dim != 1 else [2, size, 3]
    axis = dim % 3
    if len(range(*index.indices(size))) == 0:
        return  # an empty slice is left as it is
    gm = exported(Sliced(axis, index), torch.randn(*shape))
    assert stepped(gm)
    result = strided_slices(gm, Settings())
    assert result.modified and not stepped(result.graph_module)
    result.graph_module.recompile()
    x = torch.randn(batch, *shape[1:])
    torch.testing.assert_close(result.graph_module(x)[0], x[(slice(None),) * axis + (index,)] + 1.0, rtol=0, atol=0)


def test_a_box_decoders_columns_become_reshape_and_select() -> None:
    """torchvision's BoxCoder.decode_single spells a box's four columns as ``[:, k::4]``."""
    gm = exported(Sliced(2, slice(1, None, 4)), torch.randn(2, 5, 12))
    result = strided_slices(gm, Settings())
    ops = op_histogram(result.graph_module)
    assert ops["aten.select.int"] == 1 and ops["aten.view.default"] == 1 and not stepped(result.graph_module)
    result.graph_module.recompile()
    x = torch.randn(3, 5, 12)
    torch.testing.assert_close(result.graph_module(x)[0], x[:, :, 1::4] + 1.0, rtol=0, atol=0)


def test_a_last_element_past_the_blocks_is_concatenated() -> None:
    """Size 5, ``0::2``: three elements, but three blocks of 2 would need 6."""
    gm = exported(Sliced(1, slice(0, None, 2)), torch.randn(2, 5))
    result = strided_slices(gm, Settings())
    assert op_histogram(result.graph_module)["aten.cat.default"] == 1
    result.graph_module.recompile()
    x = torch.randn(4, 5)
    torch.testing.assert_close(result.graph_module(x)[0], x[:, 0::2] + 1.0, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("dim", "dynamic"),
    [(0, {0: torch.export.Dim("rows", min=3, max=8)}), (1, {0: BATCH, 1: torch.export.Dim("n", min=3, max=64)})],
    ids=["batch-axis", "dynamic-dim"],
)
def test_batch_axis_and_dynamic_dims_are_left_alone_with_the_reason(
    dim: int, dynamic: dict[int, object], caplog: pytest.LogCaptureFixture
) -> None:
    gm = exported(Sliced(dim, slice(0, None, 2)), torch.randn(4, 6), dynamic)
    with caplog.at_level(logging.DEBUG, logger="fxdeploy.passes.ncnn.strided_slices"):
        result = strided_slices(gm, Settings())
    assert not result.modified and stepped(result.graph_module)
    assert ("batch axis" if dim == 0 else "is dynamic") in caplog.text
