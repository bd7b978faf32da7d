"""row_wise: ops on selected rows keep them apart; their count as a shape becomes the bound."""

from __future__ import annotations

import pytest
import torch

from fxdeploy import ops
from fxdeploy.capture.emptied import OtherSide
from fxdeploy.errors import CaptureError
from fxdeploy.passes.padding import CompactionError, pad_compactions
from fxdeploy.passes.padding.row_wise import ROW_WISE
from fxdeploy.passes.padding.rows import PaddedRows
from fxdeploy.settings import Settings
from tests.passes.padding.helpers import assert_matches_eager, captured, padded, rand


class CountAsShape(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kept = x[x[:, 0] > 0.5]
        n = kept.shape[0]
        return kept.reshape(n, 2, 2).sigmoid(), torch.arange(n) * 3


def test_counts_used_as_shapes_become_bounds() -> None:
    model = CountAsShape()
    gm, _, after = padded(model, rand(40, 4))
    arange = next(n for n in gm.graph.nodes if str(n.target) == "aten.arange.default" and n.args[0] == 40
                  and any(str(u.target) == "aten.mul.Tensor" for u in n.users))
    assert arange is not None
    views = [n for n in gm.graph.nodes if str(n.target) in ("aten.view.default", "aten.reshape.default")
             and n.args[1] == [40, 2, 2]]
    assert views, "the reshape by the count takes the bound"
    assert after["aten.sigmoid.default"] == 1  # row-wise: left alone
    counts = assert_matches_eager(model, gm, lambda seed: (rand(40, 4, seed=seed),))
    assert len(set(counts)) > 1


def test_check_says_why_it_does_not_match() -> None:
    class Plain(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.sigmoid()

    gm = captured(Plain(), rand(4))
    node = next(n for n in gm.graph.nodes if str(n.target) == "aten.sigmoid.default")
    assert ROW_WISE.check(node, PaddedRows(gm.graph)) == "reads no selected rows and no count of them"


class SlicesFromTheFirstRow(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        kept = x[x[:, 0] > 0.5]
        return kept[1:], kept[:-1], kept[:3]


def test_slices_from_the_first_row_keep_the_valid_rows_first() -> None:
    model = SlicesFromTheFirstRow()
    gm, _, _ = padded(model, rand(40, 4))
    counts = assert_matches_eager(model, gm, lambda seed: (rand(40, 4, seed=seed),))
    assert len(set(counts)) > 1


class LastRows(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = x[x[:, 0] > 0.5]
        return kept[-2:]


def test_slices_from_the_end_are_refused() -> None:
    """On padded rows ``[-2:]`` would take two padding rows: refused, with the call site."""
    site = r"test_row_wise.py\", line \d+, in forward: "
    with pytest.raises(CompactionError, match=site + r"slices the rows selected at .* from -2, counted from their end"):
        padded(LastRows(), rand(40, 4))


class Reversed(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = x[x[:, 0] > 0.5]
        return kept[torch.arange(kept.shape[0] - 1, -1, -1)]


def test_aranges_down_from_the_count_are_refused() -> None:
    site = r"test_row_wise.py\", line \d+, in forward: "
    with pytest.raises(CompactionError, match=site + r"an arange from .* by -1 counts from the end of the rows"):
        padded(Reversed(), rand(40, 4))


class CountFixedView(torch.nn.Module):
    """YOLOv8-pose's ``pred[:, 6:].view(len(pred), 17, 3)`` after an NMS and ``[:max_det]``: ``len``
    reads the size, which the capture decides with the example's values: the view holds a literal."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = x[x[:, 4] > 0.3]
        pred = kept[ops.nms(kept[:, :4], kept[:, 4], 0.5)[:45]]
        return pred[:, 5:].view(len(pred), 2, 3) * 2


class CountFixedHead(torch.nn.Module):
    """The same with the head of a selection: torch 2.11 fixes the slice's size itself, not only the view's."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pred = x[x[:, 4] > 0.4][:25]
        return pred[:, 5:].view(len(pred), 2, 3) + pred[:, :1, None]


class CountFixedRange(torch.nn.Module):
    """The head's count read as a number beside its rows: ``arange(len(pred))``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pred = x[x[:, 4] > 0.4][:25]
        return pred[:, :1] + torch.arange(len(pred))[:, None]


class CountFixedSelection(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = x[x[:, 0] > 0.5]
        return kept[:, 1:].view(len(kept), 2, 3)  # BREAKS: the capture fixes the selection's size


class ColumnsSplit(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kept = x[x[:, 0] > 0.5]
        return kept[:, 1:].view(-1, 2, 3), kept[:, 1:].reshape(-1)  # rows kept; rows merged with columns after


class RowsSplit(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[x[:, 0] > 0.5].view(2, -1)  # BREAKS: halves of the rows, the padding in the first


def _views(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if str(n.target) in ("aten.view.default", "aten.reshape.default")
            and isinstance(n.args[1], (list, tuple)) and len(n.args[1]) == 3]


def _boxes(seed: int) -> torch.Tensor:
    x = rand(60, 11, seed=seed)
    x[:, :4] = torch.cat([x[:, :2], x[:, :2] + x[:, 2:4] * 0.3], 1)
    return x


def test_a_view_whose_rows_the_capture_fixed_takes_the_bound() -> None:
    model, x = CountFixedView(), _boxes(0)
    fixed = _views(captured(model, x))
    assert [v.args[1] for v in fixed] == [[len(model(x)), 2, 3]]  # the example's count
    gm, _, _ = padded(model, x)
    assert [v.args[1] for v in _views(gm) if v.args[1][0] != -1] == [[45, 2, 3]]  # the bound of nms(...)[:45]
    counts = assert_matches_eager(model, gm, lambda seed: (_boxes(seed),))
    assert len(set(counts)) > 1


def test_a_head_of_selected_rows_whose_size_the_capture_fixed_takes_the_bound() -> None:
    model = CountFixedHead()
    gm, _, _ = padded(model, rand(40, 11))
    assert [v.args[1] for v in _views(gm) if v.args[1][0] != -1] == [[25, 2, 3]]
    counts = assert_matches_eager(model, gm, lambda seed: (rand(40, 11, seed=seed),))
    assert len(set(counts)) > 1 and max(counts) == 25  # heads cut at 25 and shorter ones


def test_a_count_fixed_beside_its_rows_matches_eager_or_is_refused() -> None:
    """torch 2.13 keeps the head's size and fixes the arange, which takes the bound; torch 2.11
    fixes the head's size too, and computing it again would fix the count at the example's: refused
    there (by the padding, or first by the capture's check of the other side), never rows of padding
    passed as valid (as before the refusal)."""
    model = CountFixedRange()
    try:
        gm, _, _ = padded(model, rand(40, 11))
    except CompactionError as exc:
        assert __file__ in str(exc) and "fixed at the example's count" in str(exc)
        return
    except OtherSide as exc:  # torch 2.11: the capture's check of the other side of `len(pred)` refuses first
        assert __file__ in str(exc) and "keeps one row" in str(exc)
        return
    counts = assert_matches_eager(model, gm, lambda seed: (rand(40, 11, seed=seed),))
    assert len(set(counts)) > 1


def test_a_selection_whose_size_the_capture_fixed_is_refused() -> None:
    """``len(kept)`` made the count a Python int, and torch replaced its symbol by the example's: the
    capture refuses it by its line (before, the padding pass did, naming the selection)."""
    refusal = r"test_row_wise.py:\d+ \(`return kept\[:, 1:\].view\(len\(kept\), 2, 3\).*fixed that count at \d+"
    with pytest.raises(CaptureError, match=refusal):
        captured(CountFixedSelection(), rand(40, 7))


def test_views_that_keep_the_rows_first_are_row_wise() -> None:
    model = ColumnsSplit()
    gm, _, _ = padded(model, rand(40, 7))
    counts = assert_matches_eager(model, gm, lambda seed: (rand(40, 7, seed=seed),))
    assert len(set(counts)) > 1


def test_a_view_that_splits_the_rows_is_refused() -> None:
    gm = captured(RowsSplit(), rand(40, 4))
    with pytest.raises(CompactionError, match="does not keep their dim whole") as info:
        pad_compactions(gm, Settings())
    assert __file__ in str(info.value) and "(s0" not in str(info.value)
