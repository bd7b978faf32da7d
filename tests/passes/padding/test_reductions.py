"""reductions: sums, extrema, means, softmaxes and matrix products over selected rows read the
padding as the reduction's identity, so that they equal eager's over the valid rows; any other op
that holds fewer padded dims than it reads is refused with its line."""

from __future__ import annotations

import pytest
import torch

from fxdeploy import ops
from fxdeploy.passes.padding import CompactionError, pad_compactions
from fxdeploy.settings import Settings
from tests.passes.padding.helpers import assert_matches_eager, captured, padded, rand


def pairwise_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])  # noqa: E731
    low = torch.maximum(a[:, None, :2], b[None, :, :2])
    high = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = (high - low).clamp(min=0).prod(2)
    return inter / (area(a)[:, None] + area(b)[None] - inter)


def detections(seed: int, n: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    xy = rand(n, 2, seed=seed) * 48
    return torch.cat([xy, xy + rand(n, 2, seed=seed + 100) * 24 + 4], 1), rand(n, seed=seed + 200)


class MergeNms(torch.nn.Module):
    """YOLOv5's merge NMS: each kept box becomes the score-weighted mean of the boxes it overlaps,
    ``torch.mm(weights [kept, selected], boxes [selected, 4])``: a product across the selected rows."""

    def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        keep = scores > 0.3
        b, s = boxes[keep], scores[keep]
        kept = ops.nms(b, s, 0.5)
        weights = (pairwise_iou(b[kept], b) > 0.5) * s[None]
        return torch.mm(weights, b) / weights.sum(1, keepdim=True)


class Statistics(torch.nn.Module):
    """Reductions of the selected rows: over all of them, along them, and across the columns; a
    softmax along them, running sums and products (they read only earlier rows, which come first)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        kept = x[x[:, 0] > 0.4]
        columns = kept[:, 1:]
        return (columns.sum(0), columns.mean(0), columns.amax(0), columns.amin(0), columns.max(0).indices,
                kept.sum(), (columns > 0.9).any(0), (columns > 0.05).all(0), columns.prod(0), columns.argmin(0),
                torch.logsumexp(columns, 0), (pairwise_iou(columns, columns) > 0.1).sum(1), kept.amax(1),
                columns.softmax(0), columns.log_softmax(0), columns.cumsum(0), columns.cumprod(0),
                kept[:, 1] / kept[:, 1].max())


def test_a_matrix_product_across_the_selected_rows_matches_eager() -> None:
    """It passed the pass unmasked: the rows below the threshold sat in the padding with their own
    scores, and the merged boxes moved by up to 1.2 px on fresh inputs."""
    model = MergeNms()
    gm, _, after = padded(model, *detections(0))
    assert after["aten.where.ScalarOther"] >= 2  # both factors of the product, along the rows they contract
    counts = assert_matches_eager(model, gm, lambda seed: detections(seed), seeds=8)
    assert len(set(counts)) > 1


def test_reductions_over_the_selected_rows_match_eager() -> None:
    model = Statistics()
    gm, _, _ = padded(model, rand(30, 5))
    assert_matches_eager(model, gm, lambda seed: (rand(30, 5, seed=seed),), seeds=6)


def test_reductions_of_no_selected_row_match_eager() -> None:
    class Totals(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            kept = x[x > 0.5]
            return kept.sum(), kept.mean(), (kept > 0.7).any()

    model = Totals()
    gm, _, _ = padded(model, rand(30))
    torch.testing.assert_close(gm(torch.zeros(30))[:3], model(torch.zeros(30)), equal_nan=True)  # 0, NaN, False


@pytest.mark.parametrize(
    ("reduce", "says"),
    [
        (lambda kept: kept.std(0), "aten.std"),
        (lambda kept: torch.searchsorted(kept[:, 0].contiguous(), torch.tensor([0.6, 0.8])), "aten.searchsorted"),
    ],
    ids=["std", "searchsorted"],
)
def test_an_op_that_combines_selected_rows_without_a_masked_form_is_refused(reduce, says: str) -> None:  # noqa: ANN001
    class Reduces(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return reduce(x[x[:, 0] > 0.5])

    gm = captured(Reduces(), rand(30, 3))
    with pytest.raises(CompactionError, match=f"line .*: {says}.* combines the rows selected at .*line"):
        pad_compactions(gm, Settings())
