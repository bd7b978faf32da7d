"""index_put: writes by selected indices go to a scratch row for the padding, then it is dropped."""

from __future__ import annotations

import torch

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
