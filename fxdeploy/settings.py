"""Settings: one frozen dataclass tree, passed explicitly. No ambient configuration."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

MAX_THREADS = 1024
MIN_OPSET = 18
CaptureMode = Literal["auto", "strict", "non_strict"]
Precision = Literal["fp32", "fp16", "bf16"]


class _Checked:
    """Every settings table validates its field types when built."""

    def __post_init__(self) -> None:
        check_types(self, type(self).__name__)


@dataclass(frozen=True)
class CaptureSettings(_Checked):
    mode: CaptureMode = "auto"
    """auto: non-strict torch.export unless a substituted function is called, then strict (dynamo)."""


@dataclass(frozen=True)
class OnnxSettings(_Checked):
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
class NcnnSettings(_Checked):
    fp16: bool = False
    """ncnn defaults to fp16 storage and arithmetic; fp32 is fxdeploy's default for parity."""


@dataclass(frozen=True)
class TensorRTSettings(_Checked):
    workspace_gib: float = 4.0
    """builder workspace memory pool limit."""
    engine_cache_dir: str = ""
    """where built engines are kept, keyed by ONNX hash, settings and TensorRT version."""
    nms_flavour: Literal["standard", "efficient_nms_trt"] = "standard"
    """standard: ONNX NonMaxSuppression (INMSLayer, TRT >= 10); efficient_nms_trt: the plugin (TRT < 11)."""


@dataclass(frozen=True)
class CacheSettings(_Checked):
    enabled: bool = False
    """reuse a lowered artifact when graph, settings, target, runtime version and machine match."""
    dir: str = ""
    """cache directory; empty means $FXDEPLOY_CACHE_DIR or ~/.cache/fxdeploy."""
    max_gib: float = 10.0
    """least-recently-used entries are evicted past this size."""


@dataclass(frozen=True)
class Settings:
    threads: int = 2
    """intra-op threads for every runtime (pinned the same for fair comparisons)."""
    image_streams: int = 0
    """per-image artifacts (a model that loops over its batch): how many images of one call run at
    once, the threads split among them (ONNX Runtime, OpenVINO); 0: one per thread, at most 4."""
    precision: Precision = "fp32"
    """fp32, or fp16/bf16 where the target supports it (scores and NMS inputs stay fp32)."""
    verify: bool = True
    """after lowering, run the artifact at the example, min, opt and max shapes against eager."""
    atol: float = 1e-4
    """verification tolerance: max abs error, scaled by max(1, |eager|)."""
    capture: CaptureSettings = field(default_factory=CaptureSettings)
    onnx: OnnxSettings = field(default_factory=OnnxSettings)
    ncnn: NcnnSettings = field(default_factory=NcnnSettings)
    tensorrt: TensorRTSettings = field(default_factory=TensorRTSettings)
    cache: CacheSettings = field(default_factory=CacheSettings)

    def __post_init__(self) -> None:
        check_types(self, "Settings")
        if not 1 <= self.threads <= MAX_THREADS:
            raise ValueError(f"Settings.threads must be in [1, {MAX_THREADS}], got {self.threads}")
        if self.image_streams < 0:
            raise ValueError(f"Settings.image_streams must be >= 0 (0: one per thread), got {self.image_streams}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Settings:
        return _build(cls, data, "settings")

    @classmethod
    def from_manifest(cls, data: dict[str, Any]) -> Settings:
        """A saved artifact's settings: as ``from_dict``, less the sections fxdeploy no longer has."""
        return cls.from_dict({k: v for k, v in data.items() if k not in RETIRED} if isinstance(data, dict) else data)


RETIRED = frozenset({"nms"})
"""Settings sections that artifacts saved by older fxdeploy may hold: ``nms`` was never read."""


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


PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    "fp16": {"precision": "fp16", "atol": 1e-2},
    "bf16": {"precision": "bf16", "atol": 3e-2},
    "strict-capture": {"capture": {"mode": "strict"}},
    "fast-lower": {"verify": False, "onnx": {"optimize": False}},
}
"""Named starting points; a config file and CLI flags apply on top. Print the resolved values."""


def preset(name: str) -> Settings:
    if name not in PRESETS:
        raise ValueError(f"unknown settings preset {name!r}; known: {sorted(PRESETS)}")
    return Settings.from_dict(PRESETS[name])


def merge(settings: Settings, overrides: dict[str, Any], where: str = "settings") -> Settings:
    """``settings`` with a nested dict of overrides applied (unknown keys are errors)."""
    merged = _deep_update(settings.to_dict(), overrides, where)
    return Settings.from_dict(merged)


def _deep_update(base: dict[str, Any], overrides: dict[str, Any], where: str) -> dict[str, Any]:
    out = dict(base)
    for key, value in overrides.items():
        if key not in base:
            raise ValueError(f"{where}: unknown setting {key!r}; known: {sorted(base)}")
        if isinstance(base[key], dict):
            if not isinstance(value, dict):
                raise TypeError(f"{where}.{key}: expected a table, got {type(value).__name__}")
            out[key] = _deep_update(base[key], value, f"{where}.{key}")
        else:
            out[key] = value
    return out


def check_types(obj: Any, where: str) -> None:
    """Frozen dataclasses check their own field types, so a typo in a config file fails early."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value, hint = getattr(obj, f.name), hints[f.name]
        if typing.get_origin(hint) is Literal:
            if value not in typing.get_args(hint):
                raise ValueError(f"{where}.{f.name}: expected one of {list(typing.get_args(hint))}, got {value!r}")
            continue
        expected = (int, float) if hint is float else hint
        bad_bool = hint in (int, float) and isinstance(value, bool)
        if isinstance(hint, type) and (not isinstance(value, expected) or bad_bool):
            raise TypeError(f"{where}.{f.name}: expected {hint.__name__}, got {type(value).__name__} ({value!r})")
