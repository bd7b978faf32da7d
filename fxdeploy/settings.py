"""Settings: one frozen dataclass tree, passed explicitly. No ambient configuration."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

CaptureMode = Literal["auto", "strict", "non_strict"]
Precision = Literal["fp32", "fp16"]


@dataclass(frozen=True)
class CaptureSettings:
    mode: CaptureMode = "auto"
    """auto: non-strict torch.export unless a substituted function is called, then strict (dynamo)."""


@dataclass(frozen=True)
class NMSSettings:
    """Defaults used when a pass rewrites a data-dependent NMS into multiclass_nms."""

    iou_threshold: float = 0.5
    score_threshold: float = 0.05
    max_output_boxes_per_class: int = 200
    pre_top_k: int = -1
    keep_top_k: int = 100


@dataclass(frozen=True)
class OnnxSettings:
    opset: int = 18
    ir_version: int = 10
    """ONNX IR version written; onnxruntime 1.31 reads at most 13, onnx 1.23 writes 14 by default."""
    optimize: bool = True


@dataclass(frozen=True)
class NcnnSettings:
    fp16: bool = False
    """ncnn defaults to fp16 storage and arithmetic; fp32 is fxdeploy's default for parity."""


@dataclass(frozen=True)
class TensorRTSettings:
    workspace_gib: float = 4.0
    engine_cache_dir: str = ""
    nms_flavour: Literal["standard", "efficient_nms_trt"] = "standard"


@dataclass(frozen=True)
class Settings:
    threads: int = 2
    """intra-op threads for every runtime (pinned the same for fair comparisons)."""
    precision: Precision = "fp32"
    verify: bool = True
    """after lowering, run the artifact on the example inputs and compare with eager."""
    atol: float = 1e-4
    capture: CaptureSettings = field(default_factory=CaptureSettings)
    nms: NMSSettings = field(default_factory=NMSSettings)
    onnx: OnnxSettings = field(default_factory=OnnxSettings)
    ncnn: NcnnSettings = field(default_factory=NcnnSettings)
    tensorrt: TensorRTSettings = field(default_factory=TensorRTSettings)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Settings:
        return _build(cls, data, "settings")


def _build(cls: type, data: dict[str, Any], where: str) -> Any:
    if not isinstance(data, dict):
        raise TypeError(f"{where}: expected a table/dict, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(f"{where}: unknown setting(s) {unknown}; known: {sorted(fields)}")
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        default = getattr(cls(), name)
        if dataclasses.is_dataclass(default):
            kwargs[name] = _build(type(default), value, f"{where}.{name}")
        else:
            kwargs[name] = value
    return cls(**kwargs)
