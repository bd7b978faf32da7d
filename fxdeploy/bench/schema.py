"""The benchmark result document: one versioned JSON schema (draft 2020-12), see benchmarks/SCHEMA.md.

The markdown table and the PNG plot are both made from this document, never from live objects,
so a saved JSON can be re-reported and two runs can be compared by tools that only know the
schema.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from typing import Any

SCHEMA_VERSION = 1

_NUM = {"type": ["number", "null"]}
_INT = {"type": ["integer", "null"]}
_STR = {"type": ["string", "null"]}

LATENCY = {
    "type": "object",
    "required": ["median", "p90", "p99", "min", "max", "mean", "cv"],
    "additionalProperties": False,
    "properties": {
        key: {"type": "number", "minimum": 0}
        for key in ("median", "p90", "p99", "min", "max", "mean", "std", "cv")
    } | {"count": {"type": "integer", "minimum": 1}},
}

ROW = {
    "type": "object",
    "required": [
        "name", "kind", "status", "reason", "latency_ms", "throughput", "lower_s", "lower_peak_rss_mb",
        "artifact_bytes", "max_abs_error", "cv_warning",
    ],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "kind": {"enum": ["eager", "inductor", "peer", "fxdeploy"]},
        "status": {"enum": ["ok", "failed", "unavailable"]},
        "reason": _STR,
        "version": _STR,
        "latency_ms": {"oneOf": [LATENCY, {"type": "null"}]},
        "throughput": _NUM,
        "lower_s": _NUM,
        "lower_peak_rss_mb": _NUM,
        "lower_base_rss_mb": _NUM,
        "lower_measurement": {"enum": ["subprocess", "in-process", None]},
        "artifact_bytes": _INT,
        "max_abs_error": _NUM,
        "parity_ok": {"type": ["boolean", "null"]},
        "parity_detail": _STR,
        "cv_warning": {"type": "boolean"},
        "round_medians_ms": {"oneOf": [{"type": "array", "items": {"type": "number"}}, {"type": "null"}]},
    },
}

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://fxdeploy.invalid/schemas/bench-result-1.json",
    "title": "fxdeploy benchmark result",
    "type": "object",
    "required": ["schema_version", "created", "model", "batch", "machine", "budget", "rows"],
    "additionalProperties": False,
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "created": {"type": "string", "format": "date-time"},
        "model": {"type": "string"},
        "batch": {"type": "integer", "minimum": 1},
        "input_shapes": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
        "machine": {
            "type": "object",
            "required": ["cpu", "cores", "threads", "python", "torch", "runtimes"],
            "additionalProperties": False,
            "properties": {
                "cpu": {"type": "string"},
                "cores": {"type": "integer", "minimum": 1},
                "threads": {"type": "integer", "minimum": 1},
                "python": {"type": "string"},
                "torch": {"type": "string"},
                "platform": {"type": "string"},
                "runtimes": {"type": "object", "additionalProperties": _STR},
            },
        },
        "budget": {
            "type": "object",
            "required": ["warmup_s", "warmup_runs", "min_time_s", "min_runs", "rounds"],
            "additionalProperties": False,
            "properties": {
                "warmup_s": {"type": "number", "minimum": 0},
                "warmup_runs": {"type": "integer", "minimum": 0},
                "min_time_s": {"type": "number", "minimum": 0},
                "min_runs": {"type": "integer", "minimum": 1},
                "rounds": {"type": "integer", "minimum": 1},
            },
        },
        "rows": {"type": "array", "items": ROW},
    },
}

RUNTIMES = ("fxdeploy", "onnx", "onnxscript", "onnxruntime", "openvino", "ncnn", "pnnx", "tensorrt", "transformers")


def validate(document: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError when ``document`` does not follow the schema."""
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.Draft202012Validator(SCHEMA).validate(document)


def machine_info(threads: int) -> dict[str, Any]:
    import torch

    return {
        "cpu": _cpu_name(),
        "cores": os.cpu_count() or 1,
        "threads": threads,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
        "runtimes": {name: _dist_version(name) for name in RUNTIMES},
    }


def _cpu_name() -> str:
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/cpuinfo") as handle:
                for line in handle:
                    if line.startswith("model name"):
                        return line.split(":", 1)[1].strip()
        except OSError:
            pass
    return platform.processor() or platform.machine() or "unknown"


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
