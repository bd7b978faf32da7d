"""emptied: a branch the example decided on a selection's size, checked where the selection keeps
nothing (the per-image loops are in test_per_image.py)."""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from fxdeploy import ops
from fxdeploy.errors import CaptureError


class SumOrDefault(torch.nn.Module):
    """No loop over images: the kept rows doubled, or a -1 row where none is kept."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = x[x[:, 0] > 0.5]
        if kept.shape[0] == 0:
            return torch.full((1, 4), -1.0)
        return kept * 2


class SumOrZeros(torch.nn.Module):
    """The same branch, but its side agrees with the kept rows doubled where none is kept: no rows."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = x[x[:, 0] > 0.5]
        if kept.shape[0] == 0:
            return torch.zeros(0, 4)
        return kept * 2


class RefusesNone(torch.nn.Module):
    """The model itself raises where none is kept: no input of that kind has an eager result."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = x[x[:, 0] > 0.5]
        if kept.shape[0] == 0:
            raise ValueError("nothing kept")
        return kept * 2


class KeepsAtMostThree(torch.nn.Module):
    """Truncates a crowded selection (``if n > max_det``): the example keeps fewer, so the graph never would."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = x[x[:, 0] > 0.5]
        if kept.shape[0] > 3:
            kept = kept[:3]
        return kept * 2


class KeepsAtMostSix(KeepsAtMostThree):
    """The same branch where no input can take it: six rows are all there are."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = x[x[:, 0] > 0.5]
        if kept.shape[0] > 6:
            kept = kept[:6]
        return kept * 2


class OneRowScaled(torch.nn.Module):
    """A side for exactly one kept row, which an example keeping three did not take."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = x[x[:, 0] > 0.5]
        if kept.shape[0] == 1:
            return kept * 10
        return kept * 2


class TwoRowsSwapped(torch.nn.Module):
    """A side for exactly two kept rows: their order swapped."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = x[x[:, 0] > 0.5]
        if kept.shape[0] == 2:
            return kept.flip(0)
        return kept * 1


class ThreeRowsScaled(torch.nn.Module):
    """A side for exactly three kept rows, which the example (keeping three) takes: ``Eq(u0, 3)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = x[x[:, 0] > 0.5]
        if kept.shape[0] == 3:
            return kept * 10
        return kept * 2


class NonzeroOrDefault(torch.nn.Module):
    """``nonzero`` and ``numel``: a -1 row where none is kept."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idx = (x[:, 0] > 0.5).nonzero().squeeze(1)
        if idx.numel() == 0:
            return torch.full((1, 4), -1.0)
        return x[idx] * 2


class MaskedSelectAtMostTwo(torch.nn.Module):
    """``masked_select`` truncated where crowded."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values = torch.masked_select(x[:, 1], x[:, 0] > 0.5)
        if values.shape[0] > 2:
            values = values[:2]
        return values + 1


def _example() -> torch.Tensor:
    x = torch.rand(6, 4)
    x[:3, 0], x[3:, 0] = 0.9, 0.1
    return x


@pytest.mark.parametrize("mode", ["auto", "strict"])
def test_a_branch_whose_other_side_differs_is_refused_in_either_capture_mode(mode: str) -> None:
    settings = fxdeploy.Settings(capture=fxdeploy.settings.CaptureSettings(mode=mode))
    refusal = r"test_emptied.py:\d+ \(`kept = x\[x\[:, 0\] > 0.5\]`\).*shape \[1, 4\], not the graph's \[0, 4\]"
    with pytest.raises(CaptureError, match=refusal):
        fxdeploy.lower(SumOrDefault(), (_example(),), target="onnxruntime", settings=settings)


@pytest.mark.parametrize("model", [SumOrZeros(), RefusesNone()], ids=["sides_agree", "eager_raises"])
def test_a_branch_whose_other_side_agrees_or_raises_eagerly_lowers(model: torch.nn.Module) -> None:
    deployed = fxdeploy.lower(model, (_example(),), target="onnxruntime")
    x = _example()
    torch.testing.assert_close(deployed(x), model(x))
    if isinstance(model, SumOrZeros):
        x[:, 0] = 0.1
        torch.testing.assert_close(deployed(x), model(x))


def test_a_branch_on_a_crowded_selection_the_example_did_not_take_is_refused() -> None:
    """Two rows pass in the example: torch records ``u0 <= 3``. Where every row passes, eager keeps three."""
    x = _example()
    x[2, 0] = 0.1
    refusal = r"`u0 <= 3`.*keeps every row it could.*shape \[3, 4\], not the graph's \[6, 4\]"
    with pytest.raises(CaptureError, match=refusal):
        fxdeploy.lower(KeepsAtMostThree(), (x,), target="onnxruntime")
    deployed = fxdeploy.lower(KeepsAtMostSix(), (x,), target="onnxruntime")
    x[:, 0] = 0.9
    torch.testing.assert_close(deployed(x), KeepsAtMostSix()(x))


@pytest.mark.parametrize(("model", "refusal"), [
    (OneRowScaled(), r"`Ne\(u0, 1\)`.*keeps one row.*another output #0 \(largest difference"),
    (TwoRowsSwapped(), r"`Ne\(u0, 2\)`.*keeps 2 rows.*another output #0 \(largest difference"),
], ids=["one", "two"])
def test_a_branch_for_exactly_a_few_kept_rows_is_refused(model: torch.nn.Module, refusal: str) -> None:
    with pytest.raises(CaptureError, match=refusal):
        fxdeploy.lower(model, (_example(),), target="onnxruntime")


def test_a_branch_the_example_took_for_its_own_count_is_refused() -> None:
    """Not cut: the branch fixed the count (torch replaced u0 by 3), and the capture refuses it by its line."""
    refusal = r"how many rows.*test_emptied.py:\d+ \(`if kept.shape\[0\] == 3:`\).*count at 3\..*tensor ops"
    with pytest.raises(CaptureError, match=refusal):
        fxdeploy.lower(ThreeRowsScaled(), (_example(),), target="onnxruntime")


class TrimsToThree(torch.nn.Module):
    """A loop on the kept count: the example decides each of its tests, which fix the count."""

    def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        keep = ops.nms(boxes, scores, 0.5)
        while keep.numel() > 3:
            keep = keep[:-1]
        return boxes[keep]


class FiveOfMany(torch.nn.Module):
    """A branch that agrees with its other side at 0 to 5 kept rows and differs above: at 6 to 20."""

    def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        keep = ops.nms(boxes, scores, 0.5)
        if keep.numel() > 20:
            keep = keep[:5]
        return boxes[keep]


class NmsPerClass(torch.nn.Module):
    """A loop over the classes present: as many NMS calls as the example has classes."""

    def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        labels = (scores * 3).long()
        kept = [boxes[labels == c][ops.nms(boxes[labels == c], scores[labels == c], 0.5)] for c in labels.unique()]
        return torch.cat(kept)


def _boxes(n: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    xy = torch.rand(n, 2, generator=generator) * 200
    return torch.cat([xy, xy + 10], 1), torch.rand(n, generator=generator)


@pytest.mark.parametrize(("model", "refusal"), [
    (TrimsToThree(), r"`while keep.numel\(\) > 3:`.*decision\(s\), torch recorded `u0 > 3`.*fixed that count at \d+\."),
    (FiveOfMany(), r"called from .*`keep = ops.nms\(boxes, scores, 0.5\)`.*`u0 > 20`.*keeps 20 rows.*\[20, 4\], not"),
    (NmsPerClass(), r"`kept = \[boxes.*for c in labels.unique\(\)\]`.*fixed that count at 3.*one batched_nms"),
], ids=["loop", "edge", "unique"])
def test_a_branch_decided_away_from_no_rows_is_refused(model: torch.nn.Module, refusal: str) -> None:
    """The first two lowered and returned 5 (or the example's count less 3) rows for every input: at 0
    to 2 kept rows, the only sizes the check cut to, the graph and eager agree. The loop over classes
    failed in the padding pass, which called it a bug of its own."""
    boxes, scores = _boxes()
    assert len(ops.nms(boxes, scores, 0.5)) > 20
    with pytest.raises(CaptureError, match=refusal):
        fxdeploy.lower(model, (boxes, scores), target="onnxruntime")


@pytest.mark.parametrize(("model", "refusal"), [
    (NonzeroOrDefault(), r"`idx = \(x\[:, 0\] > 0.5\).nonzero\(\).squeeze\(1\)`.*`Ne\(u0, 0\)`.*keeps none"),
    (MaskedSelectAtMostTwo(), r"`values = torch.masked_select\(.*`u0 <= 2`.*keeps every row it could.*\[2\], not"),
], ids=["nonzero", "masked_select"])
def test_other_selections_are_cut_too(model: torch.nn.Module, refusal: str) -> None:
    x = _example()
    x[2, 0] = 0.1  # two rows kept: below the truncation
    with pytest.raises(CaptureError, match=refusal):
        fxdeploy.lower(model, (x,), target="onnxruntime")


def test_a_tensor_against_a_number_is_a_difference_not_a_crash() -> None:
    from fxdeploy.capture.emptied import _difference

    assert _difference([torch.zeros(2)], [3]) == "returns tensor([0., 0.]) as output #0, not the graph's 3"
    assert _difference([3], [3]) == "" and _difference([torch.ones(2)], [torch.ones(2)]) == ""


class SkipsByLen(torch.nn.Module):
    """``if not len(kept): continue``: ``len()`` must return an int, which fixes the count (``shape[0]`` does not)."""

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        out = [torch.zeros(0, 4)] * x.shape[0]
        for i, image in enumerate(x):
            kept = image[image[:, 0] > 0.5]
            if not len(kept):
                continue
            out[i] = kept * 2
        return out


def test_a_branch_on_len_of_a_selection_is_refused_saying_to_write_shape_0() -> None:
    """Before, the refusal read as if the code used the count as a number, naming no branch."""
    x = torch.stack([_example(), _example()])
    refusal = r"test_emptied.py:\d+ \(`if not len\(kept\):`\).*fixed that count at 3"
    with pytest.raises(CaptureError, match=refusal) as e:
        fxdeploy.lower(SkipsByLen(), (x,), target="onnxruntime")
    assert "`if not len(x): continue` does so, where `if not x.shape[0]: continue` does not" in str(e.value)
    assert "Write x.shape[0] where len(x) stood" in str(e.value)
