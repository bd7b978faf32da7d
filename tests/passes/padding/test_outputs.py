"""outputs: selected rows returned get their count as a hidden output, and zeroed padding."""

from __future__ import annotations

import torch

from fxdeploy.passes.record import record
from tests.passes.padding.helpers import assert_matches_eager, padded, rand


class PerImage(torch.nn.Module):
    """A per-image loop (the batch is static in the graph: capture takes it image by image)."""

    def forward(self, x: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        results = []
        for image in x:
            keep = image[:, 0] > 0.5
            results.append({"rows": image[keep], "first": image[keep][:, 0]})
        return results


def test_one_count_per_selection_hidden_and_trimmed() -> None:
    model = PerImage()
    gm, _, _ = padded(model, rand(2, 30, 3))
    names = list(record(gm).output_names)
    assert record(gm).hidden == ("row_count_0", "row_count_1") and tuple(names[-2:]) == record(gm).hidden
    # both outputs of one image share its count
    assert {n: r.count for n, r in record(gm).trim.items()} == {
        names[0]: "row_count_0", names[1]: "row_count_0", names[2]: "row_count_1", names[3]: "row_count_1",
    }
    raw = dict(zip(names, gm(rand(2, 30, 3, seed=4)), strict=True))
    count = int(raw["row_count_0"])
    assert 0 < count < 30 and bool((raw[names[0]][count:] == 0).all())  # the padding is zeroed

    counts = assert_matches_eager(_Flat(model), gm, lambda seed: (rand(2, 30, 3, seed=seed),))
    assert len(set(counts)) > 1


class _Flat(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [t for image in self.model(x) for t in image.values()]


class SelectedFlags(torch.nn.Module):
    """A comparison over selected rows, returned: a bool output padded with False, not an int64 one."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kept = x[x[:, 0] > 0.5]
        return kept[:, 1] > 0.5, kept


def test_selected_bool_rows_stay_bool() -> None:
    model = SelectedFlags()
    gm, _, _ = padded(model, rand(30, 3))
    flags = gm(rand(30, 3, seed=2))[0]
    assert flags.dtype == torch.bool and flags.shape == (30,)
    counts = assert_matches_eager(model, gm, lambda seed: (rand(30, 3, seed=seed),))  # dtypes compared too
    assert len(set(counts)) > 1
