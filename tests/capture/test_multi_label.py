"""A multi-label selection (``i, j = torch.where(scores > t)``, ``nonzero().T``) after a Python branch
on how many rows a filter kept (``if not x.shape[0]: continue``), as Ultralytics' NMS writes it with
``multi_label=True``. The branch makes capture run with the example's real values, and torch's
cross-check of each view's fake offset against the real one read ``nonzero``'s second column (a view
at offset n) as ``n != 746``: it fixed the count at the example's. ``torch.where`` then failed inside
torch (``PendingUnbackedSymbolNotFound``, hidden behind the branch's own error) and ``nonzero().T``
was refused as "the capture fixed the number of rows selected here" (``capture/real_values.py``).
"""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from fxdeploy.capture.emptied import OtherSide
from fxdeploy.ops import nms
from tests.detections import assert_same_detections
from tests.helpers import require_target

CONF = 0.25


class MultiLabelNMS(torch.nn.Module):
    """Per image: rows whose best class passes, skipped where none does, then one row per class
    that passes (``spelling``: ``where``, ``nonzero``, ``as_tuple`` or ``argwhere``), the best
    ``max_nms`` of them where there are more, class-offset NMS, at most 300."""

    def __init__(self, spelling: str = "where", default_row: bool = False, max_nms: int = 30000) -> None:
        super().__init__()
        self.spelling, self.default_row, self.max_nms = spelling, default_row, max_nms

    def forward(self, prediction: torch.Tensor) -> list[torch.Tensor]:
        output = [torch.zeros((0, 6))] * prediction.shape[0]
        xy, wh = prediction[..., :2], prediction[..., 2:4].abs()  # boxes valid for any input (lower()'s check)
        prediction = torch.cat((xy, xy + wh, prediction[..., 4:]), -1)
        for xi, x in enumerate(prediction):
            x = x[x[:, 4:].amax(1) > CONF]
            if not x.shape[0]:
                continue
            box, cls = x.split((4, x.shape[1] - 4), 1)
            if self.spelling == "where":
                i, j = torch.where(cls > CONF)
            elif self.spelling == "as_tuple":
                i, j = (cls > CONF).nonzero(as_tuple=True)
            elif self.spelling == "argwhere":
                i, j = torch.argwhere(cls > CONF).unbind(1)
            else:
                i, j = (cls > CONF).nonzero(as_tuple=False).T
            x = torch.cat((box[i], x[i, 4 + j, None], j[:, None].float()), 1)
            if self.default_row and not x.shape[0]:
                output[xi] = torch.full((1, 6), -1.0)
                continue
            if x.shape[0] > self.max_nms:  # as Ultralytics: the best max_nms only where there are more
                x = x[x[:, 4].argsort(descending=True)[: self.max_nms]]
            keep = nms(x[:, :4] + x[:, 5:6] * 4096, x[:, 4], 0.45)
            output[xi] = x[keep[:300]]
        return output


def _predictions(batch: int, seed: int) -> torch.Tensor:
    """[batch, 200, 4 + 5]: boxes (x, y, w, h) in a 320 px image, class scores in (0, 0.6); the last
    image keeps no row."""
    g = torch.Generator().manual_seed(seed)
    xy, wh = torch.rand(batch, 200, 2, generator=g) * 300, torch.rand(batch, 200, 2, generator=g) * 50 + 2
    scores = torch.rand(batch, 200, 5, generator=g) * 0.6
    scores[-1] *= 0.3
    return torch.cat((xy, wh, scores), -1)


def _dicts(results: list[torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    return [{"boxes": r[:, :4], "scores": r[:, 4], "labels": r[:, 5].long()} for r in results]


@pytest.mark.parametrize(("spelling", "target"), [("where", "onnxruntime"), ("nonzero", "onnxruntime"),
                                                  ("as_tuple", "onnxruntime"), ("argwhere", "onnxruntime"),
                                                  ("where", "openvino")])
def test_a_multi_label_selection_after_a_branch_on_the_kept_rows_matches_eager(spelling: str, target: str) -> None:
    require_target(target)
    model = MultiLabelNMS(spelling)
    deployed = fxdeploy.lower(model, (_predictions(2, 0)[:1].repeat(2, 1, 1),), target=target,
                              dynamic_shapes={"prediction": {0: ("batch", 1, 4)}})
    x = _predictions(3, 1)
    want = model(x)
    assert [len(w) > 100 for w in want] == [True, True, False], [len(w) for w in want]
    assert_same_detections(_dicts(want), _dicts(deployed(x)))


def test_a_branch_on_the_rows_a_where_kept_is_checked_where_it_keeps_none() -> None:
    """A default row where the multi-label selection keeps none: eager dispatches ``torch.where`` as
    ``nonzero``, which the check now cuts in its place (before, it logged "not checked")."""
    x = _predictions(2, 0)[:1].repeat(2, 1, 1)
    line = r"test_multi_label\.py:\d+ \(`i, j = torch\.where\(cls > CONF\)`\).*keeps none"
    with pytest.raises(OtherSide, match=line):
        fxdeploy.lower(MultiLabelNMS("where", default_row=True), (x,), target="onnxruntime",
                       dynamic_shapes={"prediction": {0: ("batch", 1, 4)}})


def test_a_head_of_the_rows_taken_where_the_example_has_more_matches_eager_where_it_has_fewer() -> None:
    """``if n > max_nms: x = x[x[:, 4].argsort(descending=True)[:max_nms]]`` with the example over
    max_nms: torch recorded ``u1 > 100`` and wrote the head's size as 100, for every count. The padding
    refused it ("combines the rows selected"); the head is counted now (``row_wise._restore_fixed``),
    and an image with fewer rows than max_nms (the side the example did not take) matches eager."""
    model = MultiLabelNMS("where", max_nms=100)
    x = _predictions(3, 1)
    deployed = fxdeploy.lower(model, (x[:2],), target="onnxruntime")
    y = torch.cat((x[:1], x[2:]))  # the second image keeps none
    y[1, :5, 4:] = torch.tensor([0.9, 0.3, 0.1, 0.1, 0.1])  # ... but for ten (row, class) pairs: fewer than 100
    want = model(y)
    assert len(want[0]) > 30 and 0 < len(want[1]) <= 10, [len(w) for w in want]
    assert_same_detections(_dicts(want), _dicts(deployed(y)))
