"""target="auto": every available target is tried, parity failures are dropped, the fastest is kept.

Nothing here asserts a timing: "within 5% of the best recorded median" is a property of the
decision, checked on the numbers auto itself recorded.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import fxdeploy
from fxdeploy.parity.auto import lower_auto
from tests.helpers import max_abs_error


def _dict_mlp() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    from examples.models import dict_mlp

    return dict_mlp()


def test_auto_lowers_to_the_fastest_parity_passing_target(tmp_path: Path) -> None:
    model, inputs = _dict_mlp()
    deployed = fxdeploy.lower(model, inputs, target="auto")
    auto = deployed.manifest["info"]["auto"]
    table = {row["target"]: row for row in auto["candidates"]}
    assert set(table) == set(fxdeploy.targets())  # every registered target has a row
    for name, status in fxdeploy.targets().items():
        if not status.available:
            assert table[name]["status"] == "unavailable" and table[name]["reason"], table[name]
        else:
            assert table[name]["status"] in ("ok", "failed", "parity_failed"), table[name]
            assert table[name]["status"] == "ok" or table[name]["reason"], table[name]
    chosen = table[auto["chosen"]]
    assert deployed.target == auto["chosen"] and chosen["status"] == "ok" and chosen["parity_error"] < 1e-4
    best = min(row["median_ms"] for row in table.values() if row["status"] == "ok")
    assert chosen["median_ms"] <= 1.05 * best
    assert auto["why"]
    with torch.no_grad():
        assert max_abs_error(deployed(*inputs), model(*inputs)) < 1e-4

    loaded = fxdeploy.load(deployed.save(tmp_path / "auto"))
    assert loaded.target == auto["chosen"] and loaded.manifest["info"]["auto"]["chosen"] == auto["chosen"]


def test_a_candidate_failing_parity_is_dropped() -> None:
    available = [n for n in ("onnxruntime", "torchscript") if fxdeploy.targets()[n].available]
    if len(available) < 2:
        pytest.skip(f"needs onnxruntime and torchscript; available here: {available}")
    model, inputs = _dict_mlp()

    def broken(outputs: dict[str, object]) -> dict[str, object]:
        return dict(outputs, score=outputs["score"] + 1.0)  # type: ignore[operator]

    deployed = lower_auto(
        fxdeploy.lower, model, inputs, candidates=available, warmup_s=0.02, measure_s=0.05, min_runs=3, rounds=2,
        transform={"torchscript": broken},
    )
    table = {row["target"]: row for row in deployed.manifest["info"]["auto"]["candidates"]}
    assert deployed.target == "onnxruntime"
    assert table["torchscript"]["status"] == "parity_failed"
    assert "score" in table["torchscript"]["reason"] and table["torchscript"]["median_ms"] is None
    assert table["onnxruntime"]["status"] == "ok" and table["onnxruntime"]["median_ms"] > 0


def test_no_passing_candidate_is_an_error() -> None:
    model, inputs = _dict_mlp()
    with pytest.raises(fxdeploy.LoweringError, match="no target lowered this model and matched eager"):
        lower_auto(fxdeploy.lower, model, inputs, candidates=["onnxruntime"], warmup_s=0.0, measure_s=0.0, min_runs=1,
                   transform={"onnxruntime": lambda out: dict(out, score=out["score"] * 2)})


def test_unknown_candidate_is_a_usage_error() -> None:
    model, inputs = _dict_mlp()
    with pytest.raises(ValueError, match="unknown target"):
        lower_auto(fxdeploy.lower, model, inputs, candidates=["nope"])
