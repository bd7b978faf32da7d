"""The built-in targets' settings sections, declared by their targets as a plugin declares its own
(``Target.sections``): ``onnx`` (ONNX Runtime, OpenVINO, TensorRT), ``openvino``, ``ncnn`` and ``tensorrt``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fxdeploy.settings import Section

MIN_OPSET = 18


@dataclass(frozen=True)
class OnnxSettings(Section):
    opset: int = 0
    """ONNX opset of the exported model; 0: the target's (23 on ONNX Runtime and OpenVINO, whose
    Attention kernels then run each scaled_dot_product_attention as one node; 20 on TensorRT, whose
    parser reads Attention only from 10.14). From 18 up: fxdeploy's own translations use opset-18 ops."""
    ir_version: int = 10
    """ONNX IR version written; onnxruntime 1.31 reads at most 13, onnx 1.23 writes 14 by default."""
    optimize: bool = True
    """run the onnxscript optimizer (constant folding, dead code) on the exported model."""
    external_data_mib: float = 16.0
    """weights of at least this many MiB go to model.onnx.data beside model.onnx, written straight from
    the exporter's tensors (an inline file costs two more in-memory copies); 0: always; past 2 GiB: always."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.opset != 0 and self.opset < MIN_OPSET:
            raise ValueError(
                f"Settings.onnx.opset must be 0 (the target's) or at least {MIN_OPSET}, got {self.opset}"
            )
        if self.external_data_mib < 0:
            raise ValueError(f"Settings.onnx.external_data_mib must be >= 0, got {self.external_data_mib}")


@dataclass(frozen=True)
class NcnnSettings(Section):
    fp16: bool = False
    """ncnn defaults to fp16 storage and arithmetic; fp32 is fxdeploy's default for parity."""
    max_host_ops: int = 8
    """ops pnnx leaves unconverted run on the host instead, up to this many graph nodes (each hands
    its values between the engine and the host); past it, the lowering refuses. 0: none."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_host_ops < 0:
            raise ValueError(f"Settings.ncnn.max_host_ops must be >= 0, got {self.max_host_ops}")


@dataclass(frozen=True)
class OpenVinoSettings(Section):
    static_shapes: int = 4
    """an artifact with dynamic dims: the input shapes called a second time get a model compiled for
    exactly them (OpenVINO's static kernels; fxdeploy.runtime.openvino_static), up to this many; 0: never."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.static_shapes < 0:
            raise ValueError(f"Settings.openvino.static_shapes must be >= 0, got {self.static_shapes}")


@dataclass(frozen=True)
class TensorRTSettings(Section):
    workspace_gib: float = 4.0
    """builder workspace memory pool limit."""
    engine_cache_dir: str = ""
    """where built engines are kept, keyed by ONNX hash, settings and TensorRT version."""
    nms_flavour: Literal["standard", "efficient_nms_trt"] = "standard"
    """standard: ONNX NonMaxSuppression (INMSLayer, TRT >= 10); efficient_nms_trt: the plugin (TRT < 11)."""
