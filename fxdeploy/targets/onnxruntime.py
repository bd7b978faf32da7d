"""The default target: ONNX through torch.onnx, run by ONNX Runtime on the CPU."""

from __future__ import annotations

import traceback
from pathlib import Path

import torch

from fxdeploy.artifact.manifest import Manifest
from fxdeploy.capture.frames import internal, source, text_frames
from fxdeploy.errors import LoweringError
from fxdeploy.passes.antialiased_resizes import refuse_left
from fxdeploy.passes.pipelines import pipeline_for
from fxdeploy.runtime.executor import Executor
from fxdeploy.settings import Settings
from fxdeploy.stages import stage
from fxdeploy.targets.base import Lowered, LoweringJob, Target
from fxdeploy.targets.sections import OnnxSettings

OPSET = 23
"""ONNX's Attention (opset 23) carries each scaled_dot_product_attention as one node, which ONNX
Runtime and OpenVINO run as one kernel where opset 20 spells it out in six to ten (the zoo's four
transformers ran 0.3-8.5% faster on both, never slower: benchmarks/opset_bench.py)."""


OPSET_CAPS = {"torchvision.roi_align.default": 21}
"""Ops whose newest ONNX spelling ONNX Runtime lacks, with the highest opset to export them at:
torch.onnx writes torchvision's roi_align as RoiAlign-22 from opset 22, which ONNX Runtime 1.2x
does not implement; at 21 it is RoiAlign-16 (torchvision's Faster R-CNN)."""


def lower_onnx(job: LoweringJob, *, flavour: str = "standard", opset: int = OPSET) -> Lowered:
    """``opset`` is the target's default, used where ``Settings.onnx.opset`` is 0, capped by the
    graph's ops (``OPSET_CAPS``)."""
    from fxdeploy.lowering.onnx import export_onnx, save_onnx

    ops = {str(node.target) for node in job.graph_module.graph.nodes}
    opset = job.settings.onnx.opset or min([opset] + [cap for op, cap in OPSET_CAPS.items() if op in ops])
    program = export_onnx(
        job.graph_module, job.example_inputs, job.input_names, job.output_names,
        job.dynamic_shapes, job.settings, opset=opset, flavour=flavour, program=job.exported_program,
    )
    files = save_onnx(program, job.out_dir / "model.onnx", job.settings)
    return Lowered(files, {"onnx_opset": opset, "onnx_ir_version": program.model.ir_version})


def lower(job: LoweringJob) -> Lowered:
    """The ONNX; for INT8, quantized by ONNX Runtime's quantize_static (fxdeploy.quantize.onnxruntime)."""
    _refuse_bfloat16(job.graph_module)
    refuse_left(job.graph_module, "onnxruntime", ("bicubic",))
    lowered = lower_onnx(job)
    if job.calibration is not None:
        from fxdeploy.quantize.onnxruntime import quantize

        with stage("int8 calibration", "onnxruntime"):
            lowered.info["int8"] = quantize(job.out_dir / "model.onnx", job.calibration)
    return lowered


def _refuse_bfloat16(gm: torch.fx.GraphModule) -> None:
    """ONNX Runtime's CPU provider has bfloat16 kernels for a few ops only (no Gemm, no Conv), and
    its Python API passes no bfloat16 arrays in or out: a graph holding bfloat16 (a model cast with
    ``.bfloat16()``, a ``torch.autocast`` region) is refused here, naming where, not by a kernel
    lookup at load time."""
    calling = {(frame.filename, frame.lineno) for frame in traceback.extract_stack()}
    for node in gm.graph.nodes:
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor) or value.dtype != torch.bfloat16:
            continue
        # a region torch retraced (autocast) records the retrace's stack: the call of lower() is no source line
        frames = [f for f in text_frames(node.meta.get("stack_trace", "")) if not internal(f.file)
                  and (f.file, f.line) not in calling]
        where = f" at {frames[-1]} (`{source(frames[-1])}`)" if frames else ""
        raise LoweringError(
            f"the model computes in bfloat16 ({node.name!r}{where}). ONNX Runtime's "
            "CPU provider has bfloat16 kernels for a few ops only and passes no bfloat16 arrays: use target "
            "'openvino' or 'torchscript', which run bfloat16, or lower the model in float32 (model.float(), "
            "no bfloat16 autocast)"
        )


def load(directory: Path, manifest: Manifest, settings: Settings) -> Executor:
    from fxdeploy.runtime.onnxruntime import OrtExecutor

    names = [o["name"] for o in manifest["outputs"]]
    return OrtExecutor(directory / "model.onnx", names, settings)


def version() -> str | None:
    from fxdeploy.runtime.onnxruntime import version as ort_version

    return ort_version()


TARGET = Target(
    name="onnxruntime",
    pipeline=pipeline_for("onnxruntime"),
    lower=lower,
    load=load,
    version=version,
    install_hint="pip install onnxruntime",
    precisions=("fp32", "fp16", "int8"),
    sections={"onnx": OnnxSettings},
)
