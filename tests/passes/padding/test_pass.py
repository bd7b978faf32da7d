"""pad_compactions as a whole: the rules together on postprocesses, and its refusals."""

from __future__ import annotations

import pytest
import torch

from fxdeploy import ops
from fxdeploy.capture import capture
from fxdeploy.passes import op_histogram, run_pipeline
from fxdeploy.passes.padding import CompactionError, pad_compactions
from fxdeploy.passes.pipelines import CLEANUP
from fxdeploy.passes.record import record, update
from fxdeploy.settings import Settings
from tests.passes.padding.helpers import captured


class TwoFilters(torch.nn.Module):
    """Ultralytics' shape: filter by the best score, fix the box columns in place, pick the best
    class, filter again, offset boxes by class, NMS, keep[:k], gather the rows."""

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        x = rows[rows[:, 4:].amax(1) > 0.3]
        x[:, :2] = x[:, :2] - 1.0  # an in-place write into columns of the selected rows
        conf, label = x[:, 4:].max(1, keepdim=True)
        x = torch.cat((x[:, :4], conf, label.float()), 1)[conf.view(-1) > 0.35]
        boxes = x[:, :4] + x[:, 5:6] * 1000
        keep = ops.nms(boxes, x[:, 4], 0.5)[:20]
        return x[keep]


class FilterThenBatchedNMS(torch.nn.Module):
    """The selections feed the NMS directly (examples/detector.py's TinyYolo)."""

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        conf, label = rows[:, 4:].max(1)
        keep = conf > 0.8
        boxes, conf, label = rows[:, :4][keep], conf[keep], label[keep]
        kept = ops.batched_nms(boxes, conf, label, 0.5)[:60]
        return torch.cat([boxes[kept], conf[kept, None], label[kept, None].float()], 1)


class SumsSelected(torch.nn.Module):
    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return scores[scores > 0.5].std()  # BREAKS: the padded rows would enter it (no masked form)


class ReversesSelected(torch.nn.Module):
    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return scores[scores > 0.5].flip(0)  # BREAKS: the padding would come first


class CountsSelected(torch.nn.Module):
    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return torch.ones(2) * scores[scores > 0.5].shape[0]  # BREAKS: the count as a value


class NoSelection(torch.nn.Module):
    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return scores.sigmoid()


def _rows(n: int = 80, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=generator) * 100
    boxes = torch.cat([xy, xy + torch.rand(n, 2, generator=generator) * 30 + 1], 1)
    return torch.cat([boxes, torch.rand(n, 3, generator=generator) * scale], 1)


def _trimmed(gm: torch.fx.GraphModule, *args: torch.Tensor) -> torch.Tensor:
    """Run the rewritten graph and cut the rows past the NMS count, as the host does."""
    names = list(record(gm).output_names)
    outputs = dict(zip(names, gm(*args), strict=True))
    trim = record(gm).trim[names[0]]
    return outputs[names[0]].narrow(trim.dim, 0, int(outputs[trim.count].reshape(-1)[0]))


def _static_pipeline(model: torch.nn.Module, rows: torch.Tensor) -> torch.fx.GraphModule:
    gm = captured(model, rows)
    return pad_compactions(gm, Settings()).graph_module


def test_selections_feeding_the_nms_directly_match_eager() -> None:
    gm = _static_pipeline(FilterThenBatchedNMS(), _rows())
    nms = next(n for n in gm.graph.nodes if str(n.target) == "fxdeploy.multiclass_nms.default")
    assert nms is not None
    for seed in range(4):
        other = _rows(seed=seed + 1)
        want = FilterThenBatchedNMS()(other)
        assert 5 < len(want) < 60
        torch.testing.assert_close(_trimmed(gm, other), want)


def test_two_filters_become_static_and_match_eager() -> None:
    rows = _rows()
    gm = captured(TwoFilters(), rows)
    before = op_histogram(gm)
    result = pad_compactions(gm, Settings())
    gm = result.graph_module
    gm.graph.lint()
    after = op_histogram(gm)
    assert result.modified
    assert before["aten.index.Tensor"] == 3  # two selections and the gather by kept indices
    assert after["aten.index.Tensor"] == 1 and after["aten.index_select.default"] == 2
    assert after["aten.scatter.src"] == 2
    assert "fxdeploy.nms.default" not in after and after["fxdeploy.multiclass_nms.default"] == 1
    nms = next(n for n in gm.graph.nodes if str(n.target) == "fxdeploy.multiclass_nms.default")
    scores = nms.args[1].args[0].args[0]  # unsqueezed twice to [1, N, 1]
    assert str(scores.target) == "aten.where.ScalarOther" and scores.args[2] == float("-inf")  # padding
    assert all(isinstance(s, int) for n in gm.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)
               for s in n.meta["val"].shape), "a data-dependent size is left"
    for seed in range(4):  # fresh rows: another number of survivors each time
        other = _rows(seed=seed + 1)
        want = TwoFilters()(other.clone())
        got = _trimmed(gm, other.clone())
        assert len(want) > 5
        torch.testing.assert_close(got, want)


def test_no_survivor_gives_the_empty_result() -> None:
    gm = _static_pipeline(TwoFilters(), _rows())
    quiet = _rows(scale=0.1)  # every score below both thresholds
    want = TwoFilters()(quiet.clone())
    got = _trimmed(gm, quiet.clone())
    assert want.shape == got.shape == (0, 6)


@pytest.mark.parametrize(
    ("model", "says"),
    [
        (SumsSelected(), "combines the rows selected"),
        (ReversesSelected(), "orders or moves values along the rows selected"),
        (CountsSelected(), "number of rows selected"),
    ],
    ids=["std", "flip", "count"],
)
def test_refuses_what_padding_would_change(model: torch.nn.Module, says: str) -> None:
    gm = captured(model, torch.rand(30))
    with pytest.raises(CompactionError, match=says) as info:
        pad_compactions(gm, Settings())
    assert __file__ in str(info.value)  # names the call site


def test_a_graph_without_selection_is_unchanged() -> None:
    gm = captured(NoSelection(), torch.rand(30))
    before = op_histogram(gm)
    result = pad_compactions(gm, Settings())
    assert not result.modified and op_histogram(result.graph_module) == before


class GridCells(torch.nn.Module):
    """TinyYolo's candidates: one row per grid cell of the image, filtered, then NMS."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return FilterThenBatchedNMS()(images.flatten(2).transpose(1, 2)[0])


def test_a_mask_over_rows_that_unbounded_dims_decide_names_those_dims() -> None:
    """At a dynamic width with no max, the number of candidate rows has no bound to pad to. The
    refusal names the input dim (not a symbol like s54) and says to bound it; "capture one image",
    what it said before, was wrong: this is one image."""
    result = capture(GridCells(), (torch.rand(1, 6, 4, 8),), dynamic_shapes=({3: torch.export.Dim("w", min=4)},))
    gm = result.graph_module
    update(gm, output_names=tuple(result.output_names))
    gm, _ = run_pipeline(gm, CLEANUP, Settings())
    with pytest.raises(CompactionError, match=r"dynamic dims of 'images' dim 3 decide .*give those dims a max") as info:
        pad_compactions(gm, Settings())
    assert "capture one image" not in str(info.value) and __file__ in str(info.value)
