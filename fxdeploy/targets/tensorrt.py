"""TensorRT: the ONNX of the shared ONNX lowering (NMS flavour from settings), built into an engine.

The two steps are separate on purpose: ``tensorrt_onnx`` writes exactly the ONNX that the engine
is built from, so its numerics can be checked on ONNX Runtime on machines without a GPU.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from fxdeploy.artifact.manifest import Manifest
from fxdeploy.passes.pipelines import pipeline_for
from fxdeploy.runtime.executor import Executor
from fxdeploy.settings import Settings
from fxdeploy.stages import stage
from fxdeploy.targets.base import Lowered, LoweringJob, Target
from fxdeploy.targets.onnxruntime import lower_onnx
from fxdeploy.targets.sections import OnnxSettings, TensorRTSettings

NOT_INSTALLED = (
    "TensorRT is not installed: the `tensorrt` packages on this registry are placeholders that "
    "download from an unreachable host; install TensorRT 10+ with a CUDA GPU"
)


OPSET = 20
"""TensorRT's ONNX parser reads ONNX's Attention (opset 23) only from 10.14; this target also runs on earlier 10.x."""


def tensorrt_onnx(job: LoweringJob) -> Lowered:
    """The ONNX step alone: what the TensorRT parser will see. For INT8, explicitly quantized:
    symmetric int8 Q/DQ pairs from the calibration (the graph's float region left float), which a
    strongly typed network builds as written (TensorRT 10 deprecates, and 11 removes, its implicit
    INT8 calibrator). A ``topk`` or stable sort does not rely on how TensorRT's TopK orders ties
    (``onnx_translations.UNORDERED_TIES``)."""
    nms = job.settings.tensorrt.nms_flavour  # "standard": ONNX NonMaxSuppression, TensorRT's INMSLayer
    lowered = lower_onnx(job, flavour="tensorrt" if nms == "standard" else nms, opset=OPSET)
    if job.calibration is not None:
        from fxdeploy.quantize.onnxruntime import quantize

        with stage("int8 calibration", "tensorrt"):
            lowered.info["int8"] = quantize(job.out_dir / "model.onnx", job.calibration, symmetric=True)
    return lowered


def lower(job: LoweringJob) -> Lowered:
    from fxdeploy.lowering.tensorrt import PLAN, build_engine, profile_shapes

    onnx = tensorrt_onnx(job)
    profile = profile_shapes(job.example_inputs, job.input_names, job.dynamic_shapes)
    info = build_engine(job.out_dir / "model.onnx", profile, job.settings, job.out_dir)
    info["nms_flavour"] = job.settings.tensorrt.nms_flavour
    return Lowered([*onnx.files, PLAN], {**onnx.info, **info})


def load(directory: Path, manifest: Manifest, settings: Settings) -> Executor:
    from fxdeploy.runtime.tensorrt import TensorRTExecutor

    names = [o["name"] for o in manifest["outputs"]]
    return TensorRTExecutor(directory / "model.plan", names, manifest["info"].get("tensorrt_profile", {}))


def version() -> str | None:
    from fxdeploy.runtime.tensorrt import version as trt_version

    return trt_version()


def unavailable_reason() -> str | None:
    if importlib.util.find_spec("tensorrt") is None or version() is None:
        return NOT_INSTALLED
    if not torch.cuda.is_available():
        return "no CUDA device: TensorRT needs an NVIDIA GPU, and torch.cuda.is_available() is False"
    return None


TARGET = Target(
    name="tensorrt",
    pipeline=pipeline_for("tensorrt"),
    lower=lower,
    load=load,
    version=version,
    install_hint="install TensorRT 10+ (pip install fxdeploy[tensorrt]) on a machine with a CUDA GPU",
    precisions=("fp32", "fp16", "bf16", "int8"),
    unavailable_reason=unavailable_reason,
    sections={"onnx": OnnxSettings, "tensorrt": TensorRTSettings},
)
