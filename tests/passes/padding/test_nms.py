"""nms: data-dependent NMS + consumers become one static multiclass_nms."""

from __future__ import annotations

import pytest
import torch

from fxdeploy import ops
from fxdeploy.passes import op_histogram
from fxdeploy.passes.padding import CompactionError, pad_compactions
from fxdeploy.passes.record import record
from fxdeploy.settings import Settings
from tests.passes.padding.helpers import captured


class FilterThenNMS(torch.nn.Module):
    """Score filter with a boolean mask, batched_nms, keep[:k], gathers: the usual postprocess."""

    def forward(self, boxes: torch.Tensor, logits: torch.Tensor) -> dict[str, torch.Tensor]:
        scores, labels = logits.sigmoid().max(-1)
        mask = scores > 0.3
        boxes, scores, labels = boxes[mask], scores[mask], labels[mask]
        keep = ops.batched_nms(boxes, scores, labels, 0.5)[:10]
        return {"boxes": boxes[keep] * 2, "scores": scores[keep], "labels": labels[keep]}


class CountsDetections(torch.nn.Module):
    def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        keep = ops.nms(boxes, scores, 0.5)
        return torch.ones(3) * keep.numel()  # uses the data-dependent count itself


def _inputs(n: int = 60, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=generator) * 100
    boxes = torch.cat([xy, xy + torch.rand(n, 2, generator=generator) * 30 + 1], 1)
    return boxes, torch.randn(n, 3, generator=generator)


def test_rewrite_histogram_numerics_and_trim_records() -> None:
    boxes, logits = _inputs()
    gm = captured(FilterThenNMS(), boxes, logits)
    before = op_histogram(gm)
    result = pad_compactions(gm, Settings())
    gm = result.graph_module
    gm.graph.lint()
    after = op_histogram(gm)
    assert result.modified
    assert before["fxdeploy.batched_nms.default"] == 1 and "fxdeploy.multiclass_nms.default" not in before
    assert after["fxdeploy.multiclass_nms.default"] == 1
    assert "fxdeploy.batched_nms.default" not in after
    indices = [n.args[1][0] for n in gm.graph.nodes if str(n.target) == "aten.index.Tensor"]
    assert all(i.meta["val"].dtype == torch.long for i in indices)  # gathers by kept index, no mask left
    assert record(gm).hidden == ("row_count_0",)
    trims = {n: t.to_dict() for n, t in record(gm).trim.items()}
    assert trims == {name: {"dim": 0, "count": "row_count_0"} for name in ("boxes_out", "scores", "labels")}
    for seed in range(3):  # the graph is static: other data gives other counts, same shapes
        boxes, logits = _inputs(seed=seed)
        want = FilterThenNMS()(boxes, logits)
        out_boxes, out_scores, out_labels, count = gm(boxes, logits)
        n = int(count)
        assert out_boxes.shape == (10, 4) and n == len(want["scores"])
        assert torch.equal(out_boxes[:n], want["boxes"]) and torch.equal(out_labels[:n], want["labels"])
        assert torch.equal(out_scores[:n], want["scores"]) and bool((out_scores[n:] == 0).all())


def test_no_nms_means_not_modified() -> None:
    gm = captured(torch.nn.Linear(4, 2), torch.randn(3, 4))
    assert not pad_compactions(gm, Settings()).modified


def test_unsupported_consumer_names_the_call_site() -> None:
    boxes, logits = _inputs()
    gm = captured(CountsDetections(), boxes, logits[:, 0])
    with pytest.raises(CompactionError, match=r"test_nms\.py.*used as a value"):
        pad_compactions(gm, Settings())


class KeepsGivenBoxes(torch.nn.Module):
    def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return boxes[ops.nms(boxes, scores, 0.5)]


def flipped_boxes(seed: int, n: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    """Overlapping boxes, a third of them given with one or both axes flipped."""
    generator = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=generator) * 40
    boxes = torch.cat([xy, xy + torch.rand(n, 2, generator=generator) * 30 + 5], 1)
    boxes[0::6] = boxes[0::6][:, [2, 3, 0, 1]]  # both axes: a positive area in torchvision's formula
    boxes[1::6] = boxes[1::6][:, [2, 1, 0, 3]]
    boxes[2::6] = boxes[2::6][:, [0, 3, 2, 1]]
    return boxes, torch.rand(n, generator=generator)


def normalized(boxes: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.minimum(boxes[:, :2], boxes[:, 2:]), torch.maximum(boxes[:, :2], boxes[:, 2:])], 1)


def test_flipped_boxes_overlap_nothing_as_in_torchvision() -> None:
    """torchvision's nms takes corners as given, multiclass_nms normalizes them: without collapsing
    the flipped axes first, a flipped box suppressed the boxes it covers (42 kept rows of 49)."""
    model = KeepsGivenBoxes()
    gm = pad_compactions(captured(model, *flipped_boxes(0)), Settings()).graph_module
    for seed in range(4):
        boxes, scores = flipped_boxes(seed)
        want = model(boxes, scores)
        got, count = gm(boxes, scores)
        torch.testing.assert_close(got[: int(count)], want, rtol=0, atol=0)
        assert len(want) > len(ops.nms(normalized(boxes), scores, 0.5))  # the flips change what is kept


def test_a_negative_stop_after_the_nms_drops_rows_it_does_not_cap_them() -> None:
    """``keep[:-1]`` was read as a cap of -1 rows: multiclass_nms with a negative size."""

    class AllButLast(torch.nn.Module):
        def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            return boxes[ops.nms(boxes, scores, 0.5)[:-1]]

    model = AllButLast()
    gm = pad_compactions(captured(model, *flipped_boxes(0)), Settings()).graph_module
    for seed in range(3):
        boxes, scores = normalized(flipped_boxes(seed)[0]), flipped_boxes(seed)[1]
        got, count = gm(boxes, scores)
        torch.testing.assert_close(got[: int(count)], model(boxes, scores), rtol=0, atol=0)
