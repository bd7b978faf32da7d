"""Every benchmark row is timed from the inputs to the model's output structure."""

from __future__ import annotations

import pytest
import torch

from fxdeploy.bench.context import Row, timed_call
from fxdeploy.bench.peers import unflattener


def test_the_timed_call_includes_adapt() -> None:
    calls: list[str] = []
    row = Row("peer:x", "peer")
    row.fn = lambda: calls.append("fn") or [1]
    row.adapt = lambda raw: calls.append("adapt") or {"out": raw[0]}
    assert timed_call(row)() == {"out": 1}
    assert calls == ["fn", "adapt"]


def test_a_row_without_adapt_is_timed_as_it_is() -> None:
    row = Row("fxdeploy:x", "fxdeploy")
    row.fn = lambda: "structure"
    assert timed_call(row) is row.fn


def test_a_failed_row_has_nothing_to_time() -> None:
    row = Row("peer:x", "peer").failed("no runtime")
    with pytest.raises(ValueError, match="peer:x"):
        timed_call(row)


def test_unflattener_rebuilds_the_reference_structure_with_constants_kept() -> None:
    reference = [{"scores": torch.zeros(2), "labels": torch.zeros(2, dtype=torch.int64), "name": "img0"}]
    rebuild = unflattener(reference)
    scores, labels = torch.tensor([0.9, 0.5]), torch.tensor([3, 1])
    out = rebuild([scores, labels])
    assert isinstance(out, list) and out[0]["name"] == "img0"
    assert out[0]["scores"] is scores and out[0]["labels"] is labels
    with pytest.raises(ValueError, match="3 outputs, the model returns 2 tensor leaves"):
        rebuild([scores, labels, labels])
