"""The real-architecture sweep as a matrix: fxdeploy on every target beside plain
``torch.onnx.export(dynamo=True)`` + ONNX Runtime, each model with the dynamic dims of
examples/sweep.py, checked against eager at batch 1 and 3 and at two sizes (<= 1e-4 relative;
1e-3 on ncnn).

    .venv/bin/python benchmarks/sweep.py [--models bert,wav2vec2] [--targets onnxruntime,ncnn]

Prints one markdown table (the "## Real-architecture sweep" section of benchmarks/README.md): per
pair "pass" with the worst relative error, "refused" with the first line of fxdeploy's message,
or "CRASH" with the raw exception that escaped (the exporter's column has no refusals: any
failure there is what a user of the plain exporter sees).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from examples.sweep import SWEEP, worst_relative_error  # noqa: E402

TOLERANCE = {"ncnn": 1e-3}
"""Worst relative error allowed; 1e-4 elsewhere."""


def exporter_runner(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], dims: object, workdir: str):
    """What a user of the plain exporter does: ``torch.onnx.export(dynamo=True)``, one ORT session."""
    import onnxruntime as ort

    path = os.path.join(workdir, "model.onnx")
    torch.onnx.export(model, inputs, path, dynamo=True, dynamic_shapes=_export_dims(dims), verbose=False)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    def run(*args: torch.Tensor) -> torch.Tensor:
        out = session.run(None, {n: a.numpy() for n, a in zip(names, args, strict=True)})
        return torch.from_numpy(out[0])

    return run


def _export_dims(dims: dict) -> dict:
    """The sweep's dims as torch.export Dims (a (name, min, max) tuple becomes a Dim)."""
    cache: dict[str, torch.export.Dim] = {}

    def one(spec: object) -> object:
        if isinstance(spec, tuple):
            name, low, high = spec
            return cache.setdefault(name, torch.export.Dim(name, min=low, max=high))
        return spec

    return {k: {d: one(s) for d, s in v.items()} for k, v in dims.items()}


def exporter_error(name: str, model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], dims: dict) -> float:
    with tempfile.TemporaryDirectory() as workdir:
        return worst_relative_error(name, model, exporter_runner(model, inputs, dims, workdir))


def fxdeploy_error(name: str, model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], dims: dict,
                   target: str) -> float:
    import fxdeploy

    return worst_relative_error(name, model, fxdeploy.lower(model, inputs, target=target, dynamic_shapes=dims))


def cell(run_pair: Callable[[], float], target: str) -> tuple[str, bool]:
    """(markdown cell, passed) for one pair."""
    from fxdeploy.errors import FxDeployError

    start = time.perf_counter()
    try:
        error = run_pair()
    except FxDeployError as exc:
        return f"refused: {_first(exc)}", False
    except Exception as exc:  # noqa: BLE001 - the matrix records what escaped
        return f"CRASH {type(exc).__name__}: {_first(exc)}", False
    seconds = time.perf_counter() - start
    tolerance = TOLERANCE.get(target, 1e-4)
    if error > tolerance:
        return f"mismatch {error:.2g}", False
    return f"pass ({error:.1g}, {seconds:.0f} s)", True


def _first(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return (text[:140] + "…") if len(text) > 140 else text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(SWEEP))
    parser.add_argument("--targets", default="onnxruntime,openvino,torchscript,ncnn")
    args = parser.parse_args()
    targets = args.targets.split(",")
    torch.set_num_threads(2)
    warnings.simplefilter("ignore")
    header = ["model", "torch.onnx.export + ORT", *(f"fxdeploy {t}" for t in targets)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    counts = {"export": 0, **dict.fromkeys(targets, 0)}
    for name in args.models.split(","):
        entry = SWEEP[name]
        model, inputs = entry.factory()
        text, ok = cell(functools.partial(exporter_error, name, model, inputs, entry.dynamic_shapes), "onnxruntime")
        row, counts["export"] = [name, text], counts["export"] + ok
        for target in targets:
            lower = functools.partial(fxdeploy_error, name, model, inputs, entry.dynamic_shapes, target)
            text, ok = cell(lower, target)
            row.append(text)
            counts[target] += ok
        lines.append("| " + " | ".join(row) + " |")
        print(lines[-1], flush=True)
    lines.append("| **passes** | " + " | ".join(str(counts[k]) for k in ("export", *targets)) + " |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
