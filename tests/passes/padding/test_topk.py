"""topk: topk(x, min(n, k)) over selected rows takes a static k from rows padded one float step
inside the type's finite range (never an infinity: ONNX Runtime's CUDA TopK loses those to its own
padding), the valid keys clamped a step further in, and the values gathered from the rows."""

from __future__ import annotations

import pytest
import torch

from fxdeploy.passes.padding.rows import PaddedRows
from fxdeploy.passes.padding.topk import TOPK
from tests.passes.padding.helpers import assert_matches_eager, captured, padded, rand, trimmed


class TopOfSelected(torch.nn.Module):
    """torchvision's RetinaNet per level: keep scores over a threshold, then the top min(n, k)."""

    def __init__(self, largest: bool = True) -> None:
        super().__init__()
        self.largest = largest

    def forward(self, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kept = s[s > 0.4]
        values, index = kept.topk(min(kept.shape[0], 12), largest=self.largest)
        return values, index


@pytest.mark.parametrize("largest", [True, False])
def test_topk_of_selected_rows(largest: bool) -> None:
    model = TopOfSelected(largest)
    gm, before, after = padded(model, rand(40))
    assert before["aten.topk.default"] == after["aten.topk.default"] == 1
    topk = next(n for n in gm.graph.nodes if str(n.target) == "aten.topk.default")
    assert topk.args[1] == 12 and topk.args[4] is True  # a static k, sorted: the valid results first
    padding = topk.args[0]
    assert str(padding.target) == "aten.where.ScalarOther"
    edge = torch.finfo(torch.float32).min if largest else torch.finfo(torch.float32).max
    one_in = torch.nextafter(torch.tensor(edge), torch.tensor(0.0)).item()
    assert padding.args[2] == one_in  # finite, and not the runtime's own padding value
    clamped = padding.args[1]
    assert str(clamped.target) == ("aten.clamp_min.default" if largest else "aten.clamp_max.default")
    assert clamped.args[1] == torch.nextafter(torch.tensor(one_in), torch.tensor(0.0)).item()
    counts = assert_matches_eager(model, gm, lambda seed: (rand(40, seed=seed),))
    assert 12 in counts


def test_fewer_survivors_than_k() -> None:
    """min(n, k) = n: every valid row, none of the padding."""
    model = TopOfSelected()
    gm, _, _ = padded(model, rand(40))
    x = rand(40) * 0.45  # a few above 0.4
    assert 0 < assert_matches_eager(model, gm, lambda seed: (x,), seeds=1)[0] < 12


def test_valid_rows_at_the_extremes_still_rank_ahead_of_the_padding() -> None:
    """Smallest first, so +inf passes the selection: it ranks behind every other valid row (1e30
    included) and ahead of all padding, with its own value, not the clamped key. (Only keys within
    two float steps of the extreme rank as equals; eager would order those too.)"""
    model = TopOfSelected(largest=False)
    gm, _, _ = padded(model, rand(40))
    x = rand(40) * 0.45
    x[[3, 11]] = torch.tensor([float("inf"), 1e30])
    count = assert_matches_eager(model, gm, lambda seed: (x,), seeds=1)[0]
    assert 2 < count < 12
    values = trimmed(gm, x)[0]
    assert values[-2:].tolist() == [torch.tensor(1e30).item(), float("inf")]


def test_a_static_topk_does_not_match() -> None:
    class Static(torch.nn.Module):
        def forward(self, s: torch.Tensor) -> torch.Tensor:
            return s.topk(3).values

    gm = captured(Static(), rand(10))
    node = next(n for n in gm.graph.nodes if str(n.target) == "aten.topk.default")
    assert TOPK.check(node, PaddedRows(gm.graph)) == "neither its rows nor its k come from a selection"


class TopOfSelectedIntegers(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = (x[x[:, 0] > 0.5] * 1000).long()
        return kept[:, 1].topk(min(kept.shape[0], 6)).values


def test_integer_rows_stay_integers() -> None:
    """The padding of integer rows is the type's minimum: an -inf would make the values float."""
    model = TopOfSelectedIntegers()
    gm, _, _ = padded(model, rand(30, 3))
    topk = next(n for n in gm.graph.nodes if str(n.target) == "aten.topk.default")
    assert topk.args[0].args[2] == torch.iinfo(torch.long).min
    counts = assert_matches_eager(model, gm, lambda seed: (rand(30, 3, seed=seed),))  # dtypes compared too
    assert 6 in counts


class DataK(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keep = x > 0.5
        return x[keep].topk(int(keep.sum()) // 2).values  # k read from the data, not a count of rows


def test_a_k_read_from_the_data_is_refused_with_the_call_site() -> None:
    from fxdeploy.passes.padding import CompactionError, pad_compactions
    from fxdeploy.settings import Settings

    gm = captured(DataK(), rand(40))
    with pytest.raises(CompactionError, match=r"test_topk\.py.*takes k from the data.*min\(k, rows\.shape\[0\]\)"):
        pad_compactions(gm, Settings())
