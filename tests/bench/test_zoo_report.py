"""The zoo report's bars table from a synthetic document: verdicts from the medians, and the
per-round ratio spread from rows that ran side by side."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def zoo() -> Any:
    spec = importlib.util.spec_from_file_location("zoo_report", ROOT / "benchmarks" / "zoo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(name: str, kind: str, median: float, rounds: list[float] | None, parity: bool = True) -> dict[str, Any]:
    return {"name": name, "kind": kind, "status": "ok", "latency_ms": {"median": median}, "parity_ok": parity,
            "round_medians_ms": rounds}


def _document(model: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": model, "rows": rows}


def test_spread_straddling_one_is_reported_with_the_median_verdict(zoo: Any) -> None:
    peer_rounds = [10.0] * 10
    ours_rounds = [9.5, 9.8, 10.2, 10.4, 10.1, 9.9, 10.3, 10.6, 9.7, 10.2]
    document = _document("resnet50", [
        _row("eager", "eager", 20.0, None),
        _row("peer:onnx-export+ort", "peer", 10.0, peer_rounds),
        _row("peer:slow", "peer", 30.0, [30.0] * 10),
        _row("fxdeploy:openvino", "fxdeploy", 10.3, ours_rounds),
        _row("fxdeploy:wrong", "fxdeploy", 1.0, [1.0] * 10, parity=False),  # fast but wrong: never "best"
    ])
    line = zoo.bars_line(document)
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[2] == "fxdeploy:openvino 10.30" and cells[4] == "peer:onnx-export+ort 10.00"
    assert cells[5] == "1.03x"
    middle, spread = cells[6].split(" ")
    low, high = (float(v) for v in spread.strip("()").split("-"))
    assert low < float(middle) < high and low < 1.0 < high
    assert abs(float(middle) - 1.015) < 0.006  # the median of the ten per-round ratios, 2 decimals
    assert cells[7] == "**no**" and cells[8] == "**no**"  # 0.52x eager on a CNN; 1.03x the peer


def test_without_round_medians_the_spread_is_a_dash(zoo: Any) -> None:
    document = _document("yolos_small", [
        _row("eager", "eager", 2.0, None), _row("peer:onnx-export+ort", "peer", 0.5, None),
        _row("fxdeploy:onnxruntime", "fxdeploy", 0.45, None),
    ])
    cells = [c.strip() for c in zoo.bars_line(document).strip("|").split("|")]
    assert cells[6] == "-" and cells[7] == "n/a" and cells[8] == "yes"


def test_round_ratios_pair_rounds_in_order(zoo: Any) -> None:
    ours, peer = {"round_medians_ms": [2.0, 3.0, 4.0]}, {"round_medians_ms": [1.0, 3.0, 8.0]}
    assert zoo.round_ratios(ours, peer) == [2.0, 1.0, 0.5]
    assert zoo.ratio_spread([1.0, 1.0]) == "-"  # too few rounds to speak of a spread
