"""``F.pad`` of selected rows, or by their count (``fxdeploy/passes/padding/pads.py``): a fixed-size
output (``F.pad(keep, (0, k - len))``) was refused, and a pad of selected rows by constants was
lowered with the fills after the padded rows' padding, which lower()'s check caught only where the
example left some rows out."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import fxdeploy
from fxdeploy.passes.padding.pads import check
from tests.helpers import require_target

TARGETS = ["onnxruntime", "openvino", "torchscript", "ncnn"]


class FixedSize(torch.nn.Module):
    """Per image, the five best scores over 0.5 then -1s; the boxes beside them, with their indices."""

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        rows = []
        for image in x:
            values = image.flatten(1).T  # [h*w, channels]
            keep = (values[:, 0] > 0.5).nonzero().squeeze(1)
            keep = keep[values[keep, 0].argsort(descending=True)][:5]
            boxes = F.pad(values[keep], (0, 0, 0, 5 - keep.shape[0]), value=-1.0)
            index = F.pad(keep, (0, 5 - keep.shape[0]), value=-1)
            rows.append(torch.cat([boxes, index[:, None].float()], 1))
        return [torch.stack(rows)]


class Framed(torch.nn.Module):
    """The scores over a threshold with one fill before them and two after, twice."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = x.flatten()
        return F.pad(v[v > 0.0], (1, 2), value=7.0) + F.pad(v[v > 0.0], (1, 2), value=2.0)


def _example(all_pass: bool) -> torch.Tensor:
    x = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(0))
    return x.abs() + 0.1 if all_pass else x


@pytest.mark.parametrize("target", TARGETS)
def test_a_fixed_size_pad_by_the_count_matches_eager(target: str) -> None:
    require_target(target)
    model = FixedSize()
    deployed = fxdeploy.lower(model, (_example(False),), target=target,
                              dynamic_shapes={"x": {0: ("batch", 1, 4)}})
    for seed, batch in ((1, 1), (2, 3), (3, 4)):
        x = torch.randn(batch, 3, 6, 6, generator=torch.Generator().manual_seed(seed)) * 0.6
        x[0, 0] = -1.0  # an image with no score over 0.5: all five rows are the fill
        torch.testing.assert_close(deployed(x), model(x), rtol=0, atol=0)


@pytest.mark.parametrize("target", TARGETS)
def test_selected_rows_padded_by_constants_match_eager(target: str) -> None:
    """Every row of the example passes (the count equals the bound: no padding to misplace there)."""
    require_target(target)
    model = Framed()
    deployed = fxdeploy.lower(model, (_example(True),), target=target)
    for seed in range(3):
        x = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(deployed(x), model(x), rtol=0, atol=0)


def _pad_node(model: torch.nn.Module, *args: torch.Tensor) -> torch.fx.Node:
    graph = torch.export.export(model, args).graph
    return next(n for n in graph.nodes if n.op == "call_function" and "pad" in str(n.target))


class Pad(torch.nn.Module):
    def __init__(self, amounts: tuple[int, ...], mode: str = "constant", select: bool = True) -> None:
        super().__init__()
        self.amounts, self.mode, self.select = amounts, mode, select

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x[x[:, 0] > 0] if self.select else x
        return F.pad(rows if self.mode == "constant" else rows[None], self.amounts, mode=self.mode)


@pytest.mark.parametrize(("model", "why"), [
    (Pad((1, 1), select=False), "no data-dependent size padded"),
    (Pad((1, 1)), "no data-dependent size padded"),  # the columns: row-wise
    (Pad((0, 0, -1, 0)), "crops"),
    (Pad((0, 0, 1, 1), mode="replicate"), "reads the rows it pads"),
])
def test_check_says_why_a_pad_is_left_as_it_is(model: torch.nn.Module, why: str) -> None:
    x = torch.randn(8, 3)
    assert why in (check(_pad_node(model, x)) or "")


def test_check_takes_a_pad_of_selected_rows() -> None:
    assert check(_pad_node(Pad((0, 0, 1, 2)), torch.randn(8, 3))) is None
