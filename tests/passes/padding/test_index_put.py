"""index_put: writes by selected indices go to a scratch row for the padding, then it is dropped."""

from __future__ import annotations

import pytest
import torch

from fxdeploy.passes.padding import CompactionError
from tests.passes.padding.helpers import assert_matches_eager, padded, rand


class ByLevel(torch.nn.Module):
    """torchvision's MultiScaleRoIAlign: each level's rows computed apart, written back by index."""

    def forward(self, x: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
        out = torch.full_like(x, 7.0)  # rows no level writes keep their value: padding must not land there
        for level in range(2):
            index = torch.where(levels == level)[0]
            out[index] = x[index] * (level + 2)
        return out


def _inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    levels = torch.randint(0, 3, (24,), generator=torch.Generator().manual_seed(seed))  # level 2: unwritten
    return rand(24, 5, seed=seed), levels


def test_index_put_by_level() -> None:
    model = ByLevel()
    gm, before, after = padded(model, *_inputs(0))
    assert before.get("aten.index_put_.default", 0) + before.get("aten.index_put.default", 0) == 2
    assert after["aten.index_put.default"] == 2 and "aten.index_put_.default" not in after
    assert after["aten.new_zeros.default"] == 2  # one scratch row per write
    writes = [n for n in gm.graph.nodes if str(n.target) == "aten.index_put.default"]
    assert all(str(w.args[1][0].target) == "aten.where.ScalarOther" for w in writes)  # padding -> scratch row
    assert_matches_eager(model, gm, _inputs)
    x, levels = _inputs(3)
    assert (levels == 2).any() and (levels == 0).any()  # the untouched rows are checked too


class MaskedWriteOfSelected(torch.nn.Module):
    """``kept[kept > t] = v``, ``kept[kept[:, 0] > t] = v``: a value of a static size written by
    boolean masks over selected rows, element by element (row-wise), not by indices."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = x[x[:, 0] > 0.3]
        kept[kept > 0.8] = 0.0
        kept[kept[:, 1] > 0.5] = 2.0
        return kept


def test_boolean_masks_over_selected_rows_are_row_wise() -> None:
    model = MaskedWriteOfSelected()
    gm, _, after = padded(model, rand(24, 5))
    writes = [n for n in gm.graph.nodes if str(n.target) == "aten.index_put.default"]
    assert len(writes) == 2 and all(w.args[1][0].meta["val"].dtype == torch.bool for w in writes)
    assert "aten.new_zeros.default" not in after  # no scratch row: nothing is written by index
    counts = assert_matches_eager(model, gm, lambda seed: (rand(24, 5, seed=seed),))
    assert len(set(counts)) > 1


class ScaleMaskedSelected(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = x[x[:, 0] > 0.3]
        kept[kept[:, 1] > 0.5] *= 2
        return kept


def test_selected_values_written_by_a_mask_are_refused() -> None:
    site = r"test_index_put.py\", line \d+, in forward: "
    with pytest.raises(CompactionError, match=site + r".*torch.where\(mask, f\(x\), x\)"):
        padded(ScaleMaskedSelected(), rand(24, 5))
