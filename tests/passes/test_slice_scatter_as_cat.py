"""fxdeploy.passes.slice_scatter_as_cat: a slice_scatter of a static range is the cat of the parts
it keeps and the slice it writes, element for element; anything else is left as it is."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from fxdeploy.passes.slice_scatter_as_cat import check, rewrite

aten = torch.ops.aten


def _exported(fn: Callable[..., torch.Tensor], inputs: tuple[torch.Tensor, ...], dynamic: object = None
              ) -> torch.fx.GraphModule:
    class Fn(nn.Module):
        def forward(self, *xs: torch.Tensor) -> torch.Tensor:
            return fn(*xs)

    return torch.export.export(Fn(), inputs, dynamic_shapes=dynamic).run_decompositions({}).graph_module


def _boxes_in_place(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[..., :4] = torch.cat([x[..., :2] - x[..., 2:4] / 2, x[..., :2] + x[..., 2:4] / 2], -1)  # a head's xywh
    return y


CASES: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], tuple[int, ...]]] = {
    "the first columns of the last dim": (_boxes_in_place, (2, 7, 9)),
    "a middle range of dim 1": (lambda x: x.slice_scatter(x[:, 3:5] * 2, 1, 2, 4), (3, 6, 2)),
    "negative bounds": (lambda x: x.slice_scatter(x[..., :2].exp(), -1, -3, -1), (4, 5)),
    "to the end": (lambda x: x.slice_scatter(x[:, 2:] + 1, 1, 2), (2, 6)),
    "the whole dim": (lambda x: x.slice_scatter(-x, 0), (3, 2)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_slice_scatter_becomes_a_cat_of_the_same_values(case: str) -> None:
    fn, shape = CASES[case]
    x = torch.randn(shape)
    gm = _exported(fn, (x,))
    assert any(n.target is aten.slice_scatter.default for n in gm.graph.nodes), "the case has no slice_scatter"
    assert rewrite(gm)
    assert not any(n.target is aten.slice_scatter.default for n in gm.graph.nodes)
    for _ in range(3):
        x = torch.randn(shape)
        torch.testing.assert_close(gm(x)[0], fn(x), rtol=0, atol=0)


def test_a_step_or_a_dynamic_dim_is_left_as_it_is() -> None:
    stepped = _exported(lambda x: x.slice_scatter(x[:, ::2] * 2, 1, 0, 6, 2), (torch.randn(2, 6),))
    dynamic = _exported(lambda x: x.slice_scatter(x[:, :1] * 2, 1, 0, 1), (torch.randn(2, 6),),
                        (({1: torch.export.Dim("n", min=2, max=64)},),))
    reasons = [check(n) for gm in (stepped, dynamic) for n in gm.graph.nodes if n.target is aten.slice_scatter.default]
    assert reasons == ["a step other than 1", "a dynamic size or bound along its dim"]
    assert not rewrite(stepped) and not rewrite(dynamic)
