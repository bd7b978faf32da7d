"""OpenVINO: the onnxruntime target's ONNX, compiled by OpenVINO for the CPU (INT8: NNCF's IR of it).

Sharing the ONNX step means both targets see one graph, so a difference between them is a
runtime difference, not a lowering one. The single exception is the NMS translation's IoU
threshold, one float32 step higher for OpenVINO, whose NMS suppresses at IoU == threshold.
"""

from __future__ import annotations

from pathlib import Path

from fxdeploy.artifact.manifest import Manifest
from fxdeploy.passes.antialiased_resizes import refuse_left
from fxdeploy.passes.pipelines import pipeline_for
from fxdeploy.runtime.executor import Executor
from fxdeploy.settings import Settings
from fxdeploy.stages import stage
from fxdeploy.targets.base import Lowered, LoweringJob, Target
from fxdeploy.targets.onnxruntime import lower_onnx
from fxdeploy.targets.sections import OnnxSettings, OpenVinoSettings


def lower(job: LoweringJob) -> Lowered:
    """The ONNX; for INT8, NNCF's quantized model in its place as OpenVINO IR (fxdeploy.quantize.openvino)."""
    refuse_left(job.graph_module, "openvino", ("bilinear", "bicubic"))
    lowered = lower_onnx(job, flavour="openvino")
    if job.calibration is not None:
        from fxdeploy.quantize.openvino import quantize

        with stage("int8 calibration", "openvino"):
            lowered.info["int8"], lowered.files = quantize(job.out_dir / "model.onnx", job.calibration)
    return lowered


def load(directory: Path, manifest: Manifest, settings: Settings) -> Executor:
    from fxdeploy.runtime.openvino import OpenVinoExecutor

    names = [o["name"] for o in manifest["outputs"]]
    model = "model.xml" if "model.xml" in manifest["files"] else "model.onnx"  # INT8 artifacts hold IR
    return OpenVinoExecutor(directory / model, names, settings)


def version() -> str | None:
    from fxdeploy.runtime.openvino import version as openvino_version

    return openvino_version()


TARGET = Target(
    name="openvino",
    pipeline=pipeline_for("openvino"),
    lower=lower,
    load=load,
    version=version,
    install_hint="pip install fxdeploy[openvino]",
    precisions=("fp32", "fp16", "bf16", "int8"),
    sections={"onnx": OnnxSettings, "openvino": OpenVinoSettings},
)
