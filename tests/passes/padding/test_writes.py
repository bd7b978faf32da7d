"""writes: selected rows written into a buffer of fixed size (``out[:n] = rows``) and their count
returned as a tensor, the export-friendly postprocess users write; both were refused ("the number
of rows selected ... is used as a value by aten.slice_scatter")."""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from fxdeploy import ops
from fxdeploy.passes.padding import CompactionError, pad_compactions
from fxdeploy.settings import Settings
from tests.helpers import require_target
from tests.passes.padding.helpers import assert_matches_eager, captured, padded, rand

MAX_DET = 12


def detections(seed: int, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    xy = rand(40, 2, seed=seed) * 48
    return torch.cat([xy, xy + rand(40, 2, seed=seed + 100) * 20 + 4], 1), rand(40, seed=seed + 200) * scale


class FixedSize(torch.nn.Module):
    """Kept boxes and scores in a [MAX_DET, 5] buffer of -1, and how many there are."""

    def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = torch.full((MAX_DET, 5), -1.0)
        keep = (scores > 0.35).nonzero().squeeze(1)
        b, s = boxes[keep], scores[keep]
        kept = ops.nms(b, s, 0.45)[:MAX_DET]
        n = kept.numel()
        out[:n, :4] = b[kept]
        out[:n, 4] = s[kept]
        return out, torch.tensor(n)


def fresh(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    return detections(seed, scale=(0.4, 0.45, 0.6, 1.0, 0.3)[seed % 5])  # 0 to MAX_DET kept


def test_rows_written_into_a_fixed_buffer_match_eager() -> None:
    model = FixedSize()
    gm, _, after = padded(model, *detections(0))
    assert after["aten.where.self"] >= 2  # each write keeps the buffer's rows past the count
    counts = [int(model(*fresh(seed))[1]) for seed in range(1, 11)]
    assert min(counts) < MAX_DET // 2 and max(counts) == MAX_DET
    assert_matches_eager(model, gm, fresh, seeds=10)


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_a_fixed_size_postprocess_lowers_and_matches_eager(target: str) -> None:
    require_target(target)
    model = FixedSize()
    deployed = fxdeploy.lower(model, detections(0), target=target)
    for seed in range(1, 6):
        for got, want in zip(deployed(*fresh(seed)), model(*fresh(seed)), strict=True):
            assert torch.equal(got, want)


def test_a_write_that_does_not_start_at_the_first_row_is_refused() -> None:
    class Offset(torch.nn.Module):
        def forward(self, scores: torch.Tensor) -> torch.Tensor:
            out = torch.zeros(40)
            kept = scores[scores > 0.5]
            out[2:2 + kept.shape[0]] = kept
            return out

    gm = captured(Offset(), rand(30))
    with pytest.raises(CompactionError, match="only a write of the first rows"):
        pad_compactions(gm, Settings())
