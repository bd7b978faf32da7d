"""topk_of_selection: a topk of selected rows (torchvision's RetinaNet/FCOS per level) reads the
masked rows themselves, without the partition's scatter and gather, and gives eager's rows."""

from __future__ import annotations

import torch

import fxdeploy
from fxdeploy.passes import op_histogram
from fxdeploy.passes.padding import pad_compactions
from fxdeploy.passes.topk_of_selection import check, topk_of_selection
from fxdeploy.settings import Settings
from tests.passes.padding.helpers import assert_matches_eager, captured


class PerLevel(torch.nn.Module):
    """torchvision's RetinaNet ``postprocess_detections`` for one level, as it ships."""

    def __init__(self, candidates: int = 20) -> None:
        super().__init__()
        self.candidates = candidates

    def forward(self, logits: torch.Tensor, boxes: torch.Tensor) -> tuple[torch.Tensor, ...]:
        classes = logits.shape[-1]
        scores = torch.sigmoid(logits).flatten()
        keep = scores > 0.5
        scores = scores[keep]
        idxs = torch.where(keep)[0]
        scores, order = scores.topk(min(self.candidates, idxs.size(0)))
        idxs = idxs[order]
        return scores, boxes[torch.div(idxs, classes, rounding_mode="floor")], idxs % classes


class AlsoGathersRows(PerLevel):
    """The topk's indices also gather another selection (``boxes[keep][order]``): not matched."""

    def forward(self, logits: torch.Tensor, boxes: torch.Tensor) -> tuple[torch.Tensor, ...]:
        scores = torch.sigmoid(logits).flatten()
        keep = scores > 0.5
        scores = scores[keep]
        scores, order = scores.topk(min(self.candidates, scores.size(0)))
        return scores, boxes.repeat_interleave(logits.shape[-1], 0)[keep][order]


def _inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Distinct scores (torch's own topk promises no order among ties), some seeds keeping none,
    some fewer than the candidates, some more."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(30, 4, generator=generator) * (seed % 3) - (seed % 2)  # seeds 3 and 6 keep none
    return logits, torch.rand(30, 4, generator=generator)


def _tied(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact score ties within a row and between rows, at the candidates' cut too."""
    logits, boxes = _inputs(seed * 3 + 1)
    logits[:6] = logits[6:12]
    return (logits * 2).round() / 2, boxes


class StableReference(PerLevel):
    """``PerLevel`` with ties broken by the lower index, as ONNX's TopK breaks them."""

    def forward(self, logits: torch.Tensor, boxes: torch.Tensor) -> tuple[torch.Tensor, ...]:
        classes = logits.shape[-1]
        scores = torch.sigmoid(logits).flatten()
        keep = scores > 0.5
        scores, idxs = scores[keep], torch.where(keep)[0]
        scores, order = torch.sort(scores, descending=True, stable=True)
        scores, idxs = scores[: self.candidates], idxs[order[: self.candidates]]
        return scores, boxes[torch.div(idxs, classes, rounding_mode="floor")], idxs % classes


def _padded(model: torch.nn.Module) -> torch.fx.GraphModule:
    gm = pad_compactions(captured(model, *_inputs(1)), Settings()).graph_module
    return gm


def test_the_partition_is_gone_and_eager_rows_stay() -> None:
    model = PerLevel()
    gm = _padded(model)
    before = op_histogram(gm)
    result = topk_of_selection(gm, Settings())
    gm = result.graph_module
    gm.graph.lint()
    gm.recompile()
    after = op_histogram(gm)
    assert result.modified
    assert before["aten.scatter.src"] == 1 and before["aten.cumsum.default"] == 1
    assert "aten.scatter.src" not in after and "aten.cumsum.default" not in after
    assert "aten.index_select.default" not in after and after["aten.topk.default"] == 1
    sums = [n for n in gm.graph.nodes if n.target is torch.ops.aten.sum.dim_IntList]
    assert [n.kwargs["dtype"] for n in sums] == [torch.float32]  # a bool mask's count, exact below 2**24 rows
    counts = assert_matches_eager(model, gm, _inputs, seeds=6)
    assert 0 in counts and max(counts) == 20 and any(0 < c < 20 for c in counts), counts


def test_indices_read_for_other_rows_keep_the_partition() -> None:
    gm = _padded(AlsoGathersRows())
    (topk,) = [n for n in gm.graph.nodes if str(n.target) == "aten.topk.default"]
    assert "not only to gather the rows or their order" in check(topk)
    assert not topk_of_selection(gm, Settings()).modified


def test_lowered_for_onnx_runtime_and_openvino_by_default() -> None:
    model = PerLevel(candidates=50)
    logits, boxes = _inputs(1)
    for target in ("onnxruntime", "openvino"):
        deployed = fxdeploy.lower(model, (logits, boxes), target=target)
        assert {r.name: r.modified for r in deployed.report.records}["topk_of_selection"]
        for seed in range(2, 7):
            for args, reference in ((_inputs(seed), model), (_tied(seed), StableReference(50))):
                want = reference(*args)
                assert len(want[0]) > 0 or seed % 3 == 0
                for got, expected in zip(deployed(*args), want, strict=True):
                    torch.testing.assert_close(got, expected)  # scores within a float step; rows exact
