"""``ort-extended``: ONNX Runtime, with its extended graph optimizations run once at lowering
time and saved in the artifact, so that loading it optimizes nothing.

A whole fxdeploy target in one file (docs/adding-a-target.md): a settings section, a lowering
that reuses fxdeploy's ONNX export and standard pipeline, an Executor, a Target, the torch.compile
backend and a console entry. fxdeploy finds it through the ``fxdeploy.targets`` entry point in pyproject.toml.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from fxdeploy.integrations.backends import make_backend
from fxdeploy.passes.pipelines import pipeline_for
from fxdeploy.runtime.executor import Executor, to_torch
from fxdeploy.settings import Section, Settings
from fxdeploy.targets import Lowered, LoweringJob, Target
from fxdeploy.targets.onnxruntime import lower_onnx
from fxdeploy.targets.sections import OnnxSettings

NAME = "ort-extended"


@dataclass(frozen=True)
class OrtxSettings(Section):
    """``settings.ortx``: TOML table ``[ortx]``, CLI flag ``--ortx-level``."""

    level: Literal["basic", "extended"] = "extended"
    """ONNX Runtime graph optimizations run at lowering time: basic (constant folding, redundant
    nodes) or extended (also fusions such as Conv+BatchNorm)."""


LEVELS = {"basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED"}


def lower(job: LoweringJob) -> Lowered:
    """fxdeploy's ONNX, then ONNX Runtime's optimizations at ``settings.ortx.level`` saved over it.
    A model with external weights (model.onnx.data) is kept as exported: ONNX Runtime would fold
    them inline."""
    import onnxruntime as ort

    lowered = lower_onnx(job)
    path, level = job.out_dir / "model.onnx", job.settings.ortx.level
    if lowered.files != ["model.onnx"]:
        return Lowered(lowered.files, {**lowered.info, "optimized": False})
    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[level])
    options.optimized_model_filepath = str(path.with_name("optimized.onnx"))
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    path.with_name("optimized.onnx").replace(path)
    return Lowered(["model.onnx"], {**lowered.info, "optimized": True, "level": level})


class OptimizedSession(Executor):
    """Runs the optimized model as it is: ONNX Runtime's own optimizations are switched off."""

    thread_safe = True  # InferenceSession.run may be called from several threads at once

    def __init__(self, path: Path, outputs: list[str], settings: Settings) -> None:
        import onnxruntime as ort

        super().__init__()
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.intra_op_num_threads = settings.threads
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.outputs = outputs

    def run(self, feeds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        arrays = self.session.run(self.outputs, {name: value.numpy() for name, value in feeds.items()})
        return {name: to_torch(array) for name, array in zip(self.outputs, arrays, strict=True)}


def load(directory: Path, manifest: dict[str, Any], settings: Settings) -> Executor:
    return OptimizedSession(directory / "model.onnx", [o["name"] for o in manifest["outputs"]], settings)


def version() -> str | None:
    try:
        import onnxruntime
    except ImportError:
        return None
    return onnxruntime.__version__


def make_target() -> Target:
    return Target(
        name=NAME, pipeline=pipeline_for("onnxruntime"), lower=lower, load=load, version=version,
        install_hint="pip install fxdeploy-ortx",
        sections={"ortx": OrtxSettings, "onnx": OnnxSettings},  # its own, and fxdeploy's ONNX export's
    )


backend = make_backend(NAME, "fxdeploy_ortx")
"""``torch.compile(model, backend="fxdeploy_ortx")``: each captured graph lowered to this target."""


def main(argv: list[str] | None = None) -> int:
    """``fxdeploy-ortx``: whether the target runs here, and what it did to a saved artifact."""
    import fxdeploy

    parser = argparse.ArgumentParser(prog="fxdeploy-ortx", description=main.__doc__)
    parser.add_argument("artifact", nargs="?", help="a saved ort-extended artifact")
    args = parser.parse_args(argv)
    status = fxdeploy.targets()[NAME]
    print(f"{NAME}: {'available, onnxruntime ' + str(status.version) if status.available else status.reason}")
    if args.artifact:
        info = fxdeploy.load(args.artifact).manifest["info"]
        print(f"optimized at lowering: {info.get('optimized')} ({info.get('level')}), opset {info.get('onnx_opset')}")
    return 0 if status.available else 1


if __name__ == "__main__":
    sys.exit(main())
