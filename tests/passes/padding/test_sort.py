"""sort: sort/argsort along selected rows keeps the padding last, the valid rows in eager's order."""

from __future__ import annotations

import pytest
import torch

from fxdeploy.passes.padding import CompactionError, pad_compactions
from fxdeploy.passes.padding.rows import PaddedRows
from fxdeploy.passes.padding.sort import SORT
from fxdeploy.settings import Settings
from tests.passes.padding.helpers import assert_matches_eager, captured, padded, rand, trimmed


class PreSort(torch.nn.Module):
    """YOLOv5's loop: rows over a score threshold, sorted by score, the best ``k`` kept."""

    def __init__(self, k: int = 12, stable: bool = False) -> None:
        super().__init__()
        self.k, self.stable = k, stable

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[x[:, 4] > 0.3]
        return x[x[:, 4].sort(descending=True, stable=self.stable).indices[: self.k]] if self.stable else \
            x[x[:, 4].argsort(descending=True)[: self.k]]


class SortValues(torch.nn.Module):
    """``sort`` of the selected keys whose values and indices are both read, ascending."""

    def forward(self, s: torch.Tensor, key: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values, index = key[s > 0.4].sort(stable=True)
        return values, index


def _rows(seed: int, n: int = 40, ties: bool = False) -> torch.Tensor:
    x = rand(n, 5, seed=seed)
    if ties:  # scores on a coarse grid: many equal keys
        x[:, 4] = (x[:, 4] * 5).round() / 5
    return x


def test_argsort_then_head_slice_matches_eager() -> None:
    model = PreSort()
    gm, before, after = padded(model, _rows(0))
    assert before["aten.argsort.default"] == 1 and "aten.argsort.default" not in after
    assert after["aten.sort.default"] == 1  # the key sorted once, at the static size
    assert after["aten.scatter.src"] == 2  # the selection's partition, and the sort's
    counts = assert_matches_eager(model, gm, lambda seed: (_rows(seed),), seeds=6)
    assert 12 in counts and min(counts) > 0  # more survivors than k, and all of them kept where fewer
    assert assert_matches_eager(model, gm, lambda seed: (_rows(seed) * 0.35,), seeds=1)[0] < 12


def test_stable_sort_keeps_equal_keys_in_order() -> None:
    model = PreSort(k=30, stable=True)
    gm, _, after = padded(model, _rows(0, ties=True))
    assert after["aten.sort.stable"] == 1
    assert_matches_eager(model, gm, lambda seed: (_rows(seed, ties=True),))


def test_unstable_sort_with_ties_orders_the_keys_as_eager() -> None:
    """torch's default sort leaves equal keys in an unspecified order: the keys match exactly, and
    each row is one of eager's (a tie may swap two rows with the same key)."""
    model = PreSort(k=40)
    gm, _, _ = padded(model, _rows(0, ties=True))
    for seed in range(1, 5):
        x = _rows(seed, ties=True)
        want, (got,) = model(x.clone()), trimmed(gm, x.clone())
        assert got.shape == want.shape and want.shape[0] > 10
        torch.testing.assert_close(got[:, 4], want[:, 4])
        assert sorted(map(tuple, got.tolist())) == sorted(map(tuple, want.tolist()))


@pytest.mark.parametrize("special", [float("inf"), float("-inf"), float("nan")])
def test_values_and_indices_with_infinite_and_nan_keys(special: float) -> None:
    """A valid key of +-inf or NaN still sorts before the padding: no sentinel is involved."""
    model = SortValues()
    gm, _, after = padded(model, rand(30), rand(30, seed=9))
    assert after["aten.sort.stable"] == 1 and after["aten.index_select.default"] >= 2
    for seed in range(1, 5):
        s, key = rand(30, seed=seed), rand(30, seed=seed + 10)
        s[[seed, seed + 1, seed + 2]] = 0.9  # selected, with the special keys
        key[[seed, seed + 2]] = special
        want, got = model(s, key), trimmed(gm, s, key)
        assert want[0].isnan().any() or want[0].isinf().any()
        torch.testing.assert_close(got[0], want[0], equal_nan=True)
        torch.testing.assert_close(got[1], want[1])


def test_no_survivor_sorts_to_nothing() -> None:
    model = PreSort()
    gm, _, _ = padded(model, _rows(0))
    x = _rows(3)
    x[:, 4] = 0.1
    (got,) = trimmed(gm, x)
    assert got.shape == model(x).shape == (0, 5)


def test_a_sort_along_columns_is_row_wise() -> None:
    class Columns(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x[x[:, 0] > 0.5].sort(dim=1).values

    model = Columns()
    gm = captured(model, rand(20, 4))
    node = next(n for n in gm.graph.nodes if str(n.target).startswith("aten.sort"))
    assert SORT.check(node, PaddedRows(gm.graph)) == "sorts no selected rows"  # not padded yet
    gm, _, after = padded(model, rand(20, 4))
    assert after["aten.sort.default"] == 1 and "aten.scatter.src" in after
    assert_matches_eager(model, gm, lambda seed: (rand(20, 4, seed=seed),))


def test_a_sort_along_the_rows_of_a_matrix_is_refused_with_its_line() -> None:
    class Matrix(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x[x[:, 0] > 0.5].sort(dim=0).values

    gm = captured(Matrix(), rand(20, 4))
    with pytest.raises(CompactionError, match="only a 1-D key is padded") as info:
        pad_compactions(gm, Settings())
    assert f'{__file__}", line' in str(info.value)


def test_a_static_sort_does_not_match() -> None:
    class Static(torch.nn.Module):
        def forward(self, s: torch.Tensor) -> torch.Tensor:
            return s.argsort()

    gm = captured(Static(), rand(10))
    node = next(n for n in gm.graph.nodes if str(n.target).startswith("aten.argsort"))
    assert SORT.check(node, PaddedRows(gm.graph)) == "sorts no selected rows"
