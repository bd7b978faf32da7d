"""cat: selected pieces concatenated along rows are partitioned again, valid rows first."""

from __future__ import annotations

import torch

from tests.passes.padding.helpers import assert_matches_eager, padded, rand, trimmed


class Levels(torch.nn.Module):
    """Two pyramid levels, each filtered, then one level of static rows: cat along rows."""

    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return torch.cat([a[a[:, 0] > 0.5], b[b[:, 0] > 0.6], c], 0)


class Columns(torch.nn.Module):
    """Columns of the same selected rows: row-wise, no partition needed."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = x[x[:, 0] > 0.5]
        return torch.cat([kept[:, :2] * 2, kept[:, 2:]], 1)


class Mixed(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.cat([a[a[:, 0] > 0.5], b[b[:, 0] > 0.5]], 1)


def test_levels_are_partitioned_again() -> None:
    model = Levels()
    args = (rand(30, 3), rand(20, 3, seed=9), rand(4, 3, seed=8))
    gm, before, after = padded(model, *args)
    assert before["aten.cat.default"] == 1
    assert after["aten.cumsum.default"] == after["aten.scatter.src"] == 3  # two selections, one repartition
    assert after["aten.cat.default"] == 2  # the rows, and their valid masks
    counts = assert_matches_eager(model, gm, lambda seed: (rand(30, 3, seed=seed), rand(20, 3, seed=seed + 10),
                                                            rand(4, 3, seed=seed + 20)))
    assert len(set(counts)) > 1


def test_columns_of_the_same_rows_stay_a_cat() -> None:
    model = Columns()
    gm, _, after = padded(model, rand(30, 4))
    assert after["aten.cat.default"] == 1 and after["aten.cumsum.default"] == 1
    assert len(set(assert_matches_eager(model, gm, lambda seed: (rand(30, 4, seed=seed),)))) > 1


def test_rows_of_two_selections_of_one_count_side_by_side() -> None:
    """torch.export proves the two counts equal (eager would fail otherwise): both pieces hold
    their valid rows first, so the rows line up and the cat is row-wise."""
    model, a = Mixed(), rand(30, 2)
    gm, _, after = padded(model, a, a.flip(0))
    assert after["aten.cat.default"] == 1
    counts = assert_matches_eager(model, gm, lambda seed: (rand(30, 2, seed=seed), rand(30, 2, seed=seed).flip(0)))
    assert len(set(counts)) > 1


class FilledToFive(torch.nn.Module):
    """A fixed-size output as users write it: the best five scores over 0.5, then -1s. The fill's
    size, ``5 - Min(5, u)``, is largest at no rows selected: held at its value at the bound (0), it
    lost the fill wherever fewer than five were selected."""

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        k = v[v > 0.5].sort(descending=True).values[:5]
        return torch.cat([k, k.new_full((5 - k.shape[0],), -1.0)])


def test_rows_filled_up_to_a_fixed_size_at_every_count() -> None:
    model = FilledToFive()
    gm, _, _ = padded(model, rand(40) + 0.3)
    for selected in (0, 1, 4, 5, 9):
        v = rand(40, seed=selected) * 0.5
        v[:selected] = 0.6 + torch.arange(selected) / 100
        torch.testing.assert_close(trimmed(gm, v)[0], model(v), rtol=0, atol=0)


class AtLeastFive(torch.nn.Module):
    """The scores over 0.5, then -1s up to five where fewer: ``Max(5, u)`` rows."""

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        k = v[v > 0.5]
        return torch.cat([k, k.new_full((max(0, 5 - k.shape[0]),), -1.0)])


def test_rows_filled_up_to_at_least_a_size_at_every_count() -> None:
    model = AtLeastFive()
    gm, _, _ = padded(model, rand(40) + 0.3)
    for selected in (0, 1, 5, 9):
        v = rand(40, seed=selected) * 0.5
        v[:selected] = 0.6 + torch.arange(selected) / 100
        torch.testing.assert_close(trimmed(gm, v)[0], model(v), rtol=0, atol=0)
