"""selections: x[mask], nonzero, where(cond) and masked_select become stable partitions."""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from fxdeploy.passes.padding.rows import PaddedRows
from fxdeploy.passes.padding.selections import BOOL_INDEX, NONZERO, WHERE
from tests.passes.padding.helpers import assert_matches_eager, captured, padded, rand


class BoolIndex(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[x[:, 0] > 0.5] * 2


class Nonzero(torch.nn.Module):
    def forward(self, s: torch.Tensor) -> torch.Tensor:
        return torch.nonzero(s > 0.5)


class WhereCond(torch.nn.Module):
    def forward(self, s: torch.Tensor) -> torch.Tensor:
        return torch.where(s > 0.5)[0] + 1


class MaskedSelect(torch.nn.Module):
    def forward(self, s: torch.Tensor) -> torch.Tensor:
        return torch.masked_select(s, s > 0.7)


class SelectAll(torch.nn.Module):
    """``x[x > t]`` of the whole input: a mask over every dim, the batch's included."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[x > 0.5] * 2


class FilterTwice(torch.nn.Module):
    """A filter of filtered rows: the first filter's padding must stay out of the second."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[x[:, 0] > 0.3]
        return x[x[:, 1] < 0.6]


class GridSelection(torch.nn.Module):
    """detectron2's dense-detector filter: a mask over an [HW, C] grid both indexes the scores and
    gives their (anchor, class) by nonzero, in the same row-major order."""

    def forward(self, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        keep = scores > 0.6
        return scores[keep] * 2, torch.nonzero(keep)


class GridRows(torch.nn.Module):
    """A rank-2 mask over the first two dims of a rank-3 tensor: rows of its last dim."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[x[..., 0] > 0.5]


class Nonzero3d(torch.nn.Module):
    def forward(self, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        keep = s > 0.7
        where = torch.where(keep)
        return torch.nonzero(keep), where[2] * 10 + where[0]


class NonzeroOfNumbers(torch.nn.Module):
    """NanoDet: ``where(mask, 1, 0).nonzero()``, a nonzero of an integer tensor."""

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        labels = s.argmax(1)
        return torch.where(s.amax(1) > 0.7, torch.ones_like(labels), torch.zeros_like(labels)).nonzero().squeeze(1)


class GridOfSelectedRows(torch.nn.Module):
    """A rank-2 mask over selected rows: their padding stays out of the second selection."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x[x[:, 0] > 0.4]
        keep = x > 0.7
        return x[keep], torch.nonzero(keep)


def _partitioned(after: dict[str, int], count: int) -> None:
    """Each selection became one cumsum/scatter partition, no data-dependent op left."""
    assert after["aten.cumsum.default"] == after["aten.scatter.src"] == count
    assert not {"aten.nonzero.default", "aten.masked_select.default", "aten.where.default"} & after.keys()


def test_bool_index() -> None:
    model = BoolIndex()
    gm, before, after = padded(model, rand(40, 3))
    assert before["aten.index.Tensor"] == 1
    assert "aten.index.Tensor" not in after and after["aten.index_select.default"] == 1
    _partitioned(after, 1)
    counts = assert_matches_eager(model, gm, lambda seed: (rand(40, 3, seed=seed),))
    assert len(set(counts)) > 1


def test_nonzero() -> None:
    model = Nonzero()
    gm, before, after = padded(model, rand(50))
    assert before["aten.nonzero.default"] == 1
    _partitioned(after, 1)
    assert len(set(assert_matches_eager(model, gm, lambda seed: (rand(50, seed=seed),)))) > 1


def test_where_cond() -> None:
    model = WhereCond()
    gm, before, after = padded(model, rand(50))
    assert before.keys() & {"aten.nonzero.default", "aten.where.default"}
    _partitioned(after, 1)
    assert len(set(assert_matches_eager(model, gm, lambda seed: (rand(50, seed=seed),)))) > 1


def test_masked_select() -> None:
    model = MaskedSelect()
    gm, before, after = padded(model, rand(6, 7))
    assert before.keys() & {"aten.masked_select.default", "aten.index.Tensor"}
    _partitioned(after, 1)
    assert len(set(assert_matches_eager(model, gm, lambda seed: (rand(6, 7, seed=seed),)))) > 1


def test_a_mask_over_a_grid_selects_in_row_major_order() -> None:
    model = GridSelection()
    gm, before, after = padded(model, rand(64, 4))
    assert before["aten.index.Tensor"] == before["aten.nonzero.default"] == 1
    _partitioned(after, 1)  # one partition of the mask, for both selections
    assert after["aten.div.Tensor_mode"] == after["aten.remainder.Scalar"] == 1  # the flat index unravelled
    assert after["aten.stack.default"] == 1
    assert len(set(assert_matches_eager(model, gm, lambda seed: (rand(64, 4, seed=seed),)))) > 1


def test_a_grid_mask_selects_rows_of_the_dims_after_it() -> None:
    model = GridRows()
    gm, _, after = padded(model, rand(8, 6, 3))
    _partitioned(after, 1)
    assert after["aten.index_select.default"] == 1
    assert len(set(assert_matches_eager(model, gm, lambda seed: (rand(8, 6, 3, seed=seed),)))) > 1


def test_nonzero_and_where_of_a_rank_3_mask() -> None:
    model = Nonzero3d()
    gm, _, after = padded(model, rand(3, 4, 5))
    _partitioned(after, 1)
    assert len(set(assert_matches_eager(model, gm, lambda seed: (rand(3, 4, 5, seed=seed),)))) > 1


def test_nonzero_of_numbers_selects_where_they_are_not_zero() -> None:
    model = NonzeroOfNumbers()
    gm, before, after = padded(model, rand(50, 3))
    assert before["aten.nonzero.default"] == 1
    _partitioned(after, 1)
    assert after["aten.ne.Scalar"] == 1
    assert len(set(assert_matches_eager(model, gm, lambda seed: (rand(50, 3, seed=seed),)))) > 1


def test_a_grid_mask_over_selected_rows_keeps_their_padding_out() -> None:
    model = GridOfSelectedRows()
    gm, _, after = padded(model, rand(30, 3))
    _partitioned(after, 2)
    assert after["aten.logical_and.default"] == 1
    assert len(set(assert_matches_eager(model, gm, lambda seed: (rand(30, 3, seed=seed),)))) > 1


def test_a_filter_of_filtered_rows_keeps_the_padding_out() -> None:
    model = FilterTwice()
    gm, _, after = padded(model, rand(60, 2))
    _partitioned(after, 2)
    assert after["aten.logical_and.default"] == 1  # the second mask is and-ed with the first's valid rows
    assert len(set(assert_matches_eager(model, gm, lambda seed: (rand(60, 2, seed=seed),)))) > 1


def test_no_row_selected() -> None:
    model = BoolIndex()
    gm, _, _ = padded(model, rand(40, 3))
    x = rand(40, 3) * 0.4  # every score under 0.5
    assert assert_matches_eager(model, gm, lambda seed: (x,), seeds=1) == [0]


@pytest.mark.parametrize(("model", "shape"), [(SelectAll(), (6,)), (GridRows(), (6, 3))], ids=["all", "rows"])
def test_a_mask_over_a_dynamic_batch_and_more_dims(model: torch.nn.Module, shape: tuple[int, ...]) -> None:
    """The mask's rows are the batch's (a dynamic dim, padded to its bound), and the selection
    reshapes the dims after the mask's: the padded input's trailing dims are read before padding."""
    batch_dim = {"x": {0: ("batch", 1, 5)}}
    deployed = fxdeploy.lower(model, (rand(2, *shape),), target="onnxruntime", dynamic_shapes=batch_dim)
    counts = []
    for batch, seed in ((1, 1), (2, 2), (5, 3), (5, 4)):
        x = rand(batch, *shape, seed=seed)
        want = model(x)
        torch.testing.assert_close(deployed(x), want)
        counts.append(want.shape[0])
    assert len(set(counts)) > 2


@pytest.mark.parametrize(
    ("model", "rule", "says"),
    [(Nonzero(), BOOL_INDEX, "not aten.index"), (BoolIndex(), NONZERO, "not aten.nonzero"),
     (Nonzero(), WHERE, "not aten.where(cond)")],
)
def test_checks_say_why_they_do_not_match(model: torch.nn.Module, rule, says: str) -> None:
    gm = captured(model, rand(40, 3) if isinstance(model, BoolIndex) else rand(40))
    rows = PaddedRows(gm.graph)
    reasons = {rule.check(n, rows) for n in gm.graph.nodes}
    assert says in reasons and None not in reasons


def test_integer_indexing_is_not_a_selection() -> None:
    class Gather(torch.nn.Module):
        def forward(self, x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
            return x[i]

    gm = captured(Gather(), rand(10, 2), torch.tensor([1, 3]))
    index = next(n for n in gm.graph.nodes if str(n.target) == "aten.index.Tensor")
    assert BOOL_INDEX.check(index, PaddedRows(gm.graph)) == "indexed by integers, not by one boolean mask"
