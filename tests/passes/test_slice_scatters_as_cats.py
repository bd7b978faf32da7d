"""scatters_as_slices' ``slice_scatter`` rule alone (``slice_scatters_as_cats``, what
fxdeploy.capture.vectorize runs on every target): a slice_scatter of a known range is the cat of
the parts it keeps and the slice it writes, element for element; other writes are left as they are."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from fxdeploy.passes.scatters_as_slices import scatter_span, slice_scatters_as_cats

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
    traces = {n.meta.get("stack_trace") for n in gm.graph.nodes if n.target is aten.slice_scatter.default}
    before = set(gm.graph.nodes)
    assert slice_scatters_as_cats(gm)
    assert not any(n.target is aten.slice_scatter.default for n in gm.graph.nodes)
    new = [n for n in gm.graph.nodes if n not in before and n.op == "call_function"]
    assert {n.meta.get("stack_trace") for n in new} <= traces, "a new node lost the line of the write it spells"
    for _ in range(3):
        x = torch.randn(shape)
        torch.testing.assert_close(gm(x)[0], fn(x), rtol=0, atol=0)


def test_a_step_is_left_as_it_is_and_other_writes_too() -> None:
    stepped = _exported(lambda x: x.slice_scatter(x[:, ::2] * 2, 1, 0, 6, 2), (torch.randn(2, 6),))
    reasons = [scatter_span(n) for n in stepped.graph.nodes if n.target is aten.slice_scatter.default]
    assert reasons == ["it writes every 2th row (step 2), which no slice-and-cat spells"]
    assert not slice_scatters_as_cats(stepped)
    selected = _exported(lambda x: x.select_scatter(x[:, 1] * 2, 1, 0), (torch.randn(2, 6),))
    assert not slice_scatters_as_cats(selected)  # select_scatter is scatters_as_slices' (the targets' pipelines)
    assert any(n.target is aten.select_scatter.default for n in selected.graph.nodes)


def test_a_known_range_of_a_dynamic_dim_matches_at_every_size() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.slice_scatter(x[:, :1] * 2, 1, 0, 1)

    gm = _exported(fn, (torch.randn(2, 6),), (({1: torch.export.Dim("n", min=2, max=64)},),))
    assert slice_scatters_as_cats(gm)
    assert not any(n.target is aten.slice_scatter.default for n in gm.graph.nodes)
    for n in (2, 5, 64):
        x = torch.randn(2, n)
        torch.testing.assert_close(gm(x)[0], fn(x), rtol=0, atol=0)


def test_a_view_of_the_written_value_still_applies() -> None:
    """A slice_scatter keeps its base's strides, a cat does not: a view of a transposed base that
    held for the scatter's result must still give the same values (it becomes a reshape)."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        base = x.transpose(0, 1) * 1
        return base.slice_scatter(base[:2] + 1, 0, 0, 2).transpose(0, 1).view(-1)

    x = torch.randn(3, 4)
    gm = _exported(fn, (x,))
    assert slice_scatters_as_cats(gm)
    torch.testing.assert_close(gm(x)[0], fn(x), rtol=0, atol=0)
