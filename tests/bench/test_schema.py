"""A small real benchmark run: its JSON follows the schema, and the reports are made from it."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch

import fxdeploy
from fxdeploy.bench import SCHEMA, markdown, plot, run_benchmark, validate
from fxdeploy.cli.model_spec import load_factory

SPEC = "examples/models.py:dict_mlp"

pytestmark = pytest.mark.skipif(
    not fxdeploy.targets()["onnxruntime"].available, reason="onnxruntime is not available here"
)


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    model, inputs = load_factory(SPEC)
    # Tiny budgets: this checks the document, never the numbers. Inductor is left out because its
    # first compile takes tens of seconds on a 2-core machine; the peers stay in.
    return run_benchmark(
        model, inputs, targets=["onnxruntime"], peers=True, inductor=False, threads=2, warmup_s=0.05,
        warmup_runs=2, min_time_s=0.1, min_runs=5, rounds=2, model_name=SPEC, model_spec=SPEC, progress=False,
    )


def test_document_validates_against_the_schema(document: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    validate(json.loads(json.dumps(document)))  # what a reader of the saved file sees
    assert document["schema_version"] == 1 and document["model"] == SPEC and document["batch"] == 4
    assert document["machine"]["threads"] == 2


def test_rows_cover_eager_peers_and_the_target(document: dict[str, Any]) -> None:
    rows = {row["name"]: row for row in document["rows"]}
    assert list(rows) == ["eager", "peer:onnx-export+ort", "peer:openvino-compile", "peer:pnnx+ncnn",
                          "fxdeploy:onnxruntime"]
    target = rows["fxdeploy:onnxruntime"]
    assert target["status"] == "ok", target["reason"]
    assert target["latency_ms"]["count"] >= 5 and target["latency_ms"]["median"] > 0
    assert target["parity_ok"] is True and target["max_abs_error"] < 1e-4
    assert target["lower_s"] > 0 and target["artifact_bytes"] > 0
    assert target["lower_measurement"] == "subprocess" and target["lower_peak_rss_mb"] > 0
    for row in rows.values():  # a peer may be unavailable or fail here, but then it says why
        assert row["status"] == "ok" or row["reason"], row


def test_schema_rejects_a_broken_document(document: dict[str, Any]) -> None:
    broken = json.loads(json.dumps(document))
    broken["rows"][0]["status"] = "great"
    with pytest.raises(jsonschema.ValidationError):
        validate(broken)
    del broken["machine"]
    with pytest.raises(jsonschema.ValidationError):
        validate(broken)


def test_markdown_and_png(document: dict[str, Any], tmp_path: Path) -> None:
    table = markdown(document)
    assert "| row | median ms | p90 | p99 | ratio to eager | max err | lower s | status |" in table
    assert "| eager |" in table and "1.000x" in table and "| fxdeploy:onnxruntime |" in table
    path = plot(document, tmp_path / "plot.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # IHDR comes first
    assert data[12:16] == b"IHDR" and width > 0 and height > 0 and len(data) > 1000


class _Unpicklable(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)
        self.scale = lambda x: x * 2  # a lambda attribute: torch.save cannot pickle this model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale(self.linear(x))


def test_a_model_that_cannot_reach_a_subprocess_is_lowered_in_process() -> None:
    document = run_benchmark(
        _Unpicklable().eval(), (torch.randn(2, 8),), targets=["onnxruntime"], peers=False, inductor=False,
        warmup_s=0.0, warmup_runs=1, min_time_s=0.0, min_runs=2, rounds=1, progress=False,
    )
    validate(document)
    row = document["rows"][-1]
    assert row["name"] == "fxdeploy:onnxruntime" and row["status"] == "ok", row["reason"]
    assert row["lower_measurement"] == "in-process" and row["parity_ok"] is True
