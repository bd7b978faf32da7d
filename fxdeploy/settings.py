"""Settings: one frozen dataclass tree, passed explicitly. No ambient configuration.

fxdeploy's own settings are fields of ``Settings``. A target's settings are a *section*: a frozen
dataclass the target declares (``Target.sections``, e.g. ``{"onnx": OnnxSettings}``), built-in and
plugin targets alike. ``Settings.sections`` holds one instance per declared section (its defaults
unless given), read as ``settings.onnx``; Python, TOML (``[onnx]``), the CLI flags
(``--onnx-opset``), the manifest and the cache key all see sections as they see fxdeploy's own.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from fxdeploy.errors import RegistryError

MAX_THREADS = 1024
CaptureMode = Literal["auto", "strict", "non_strict"]
Precision = Literal["fp32", "fp16", "bf16", "int8"]
Batching = Literal["vectorize", "per_image"]


class Section:
    """Base of every settings table: validates its field types when built. A target's section is
    a frozen dataclass deriving from it, one docstring per field (the CLI flag's help text)."""

    def __post_init__(self) -> None:
        check_types(self, type(self).__name__)


@dataclass(frozen=True)
class CaptureSettings(Section):
    mode: CaptureMode = "auto"
    """auto: non-strict torch.export unless a substituted function is called, then strict (dynamo)."""


@dataclass(frozen=True)
class CacheSettings(Section):
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
    batching: Batching = "vectorize"
    """a model that loops over its images in Python: "vectorize" gives the engine the whole batch
    in one call where the per-image graph vectorizes (fxdeploy.capture.vectorize), "per_image" runs
    the engine once per image. Engines that take one image at a time (ncnn) run per image anyway."""
    precision: Precision = "fp32"
    """fp32, or fp16/bf16 where the target supports it (scores and NMS inputs stay fp32), or int8
    with calibration data (``lower(..., calibration=...)``; the graph's float region stays fp32)."""
    verify: bool = True
    """after lowering, run the artifact at the example, min, opt and max shapes against eager."""
    atol: float = 1e-4
    """verification tolerance: max abs error, scaled by max(1, |eager|)."""
    capture: CaptureSettings = field(default_factory=CaptureSettings)
    cache: CacheSettings = field(default_factory=CacheSettings)
    sections: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """the targets' sections by name (``Target.sections``); one left out holds its class's defaults."""

    def __post_init__(self) -> None:
        check_types(self, "Settings")
        if not 1 <= self.threads <= MAX_THREADS:
            raise ValueError(f"Settings.threads must be in [1, {MAX_THREADS}], got {self.threads}")
        if self.image_streams < 0:
            raise ValueError(f"Settings.image_streams must be >= 0 (0: one per thread), got {self.image_streams}")
        object.__setattr__(self, "sections", MappingProxyType(_complete(self.sections)))

    def __getattr__(self, name: str) -> Any:
        """``settings.onnx``: a section by name (called only for names that are not fields)."""
        sections = self.__dict__.get("sections", {})
        if name in sections:
            return sections[name]
        raise AttributeError(f"Settings has no field or section {name!r}; sections: {sorted(sections)}")

    def with_sections(self, **sections: Any) -> Settings:
        """A copy with the given sections replaced: ``settings.with_sections(onnx=OnnxSettings(opset=20))``."""
        return dataclasses.replace(self, sections={**self.sections, **sections})

    def __reduce__(self) -> tuple[Any, ...]:  # a mapping proxy does not pickle; the plain data does
        return (Settings.from_dict, (self.to_dict(),))

    def to_dict(self, sections: Sequence[str] | None = None) -> dict[str, Any]:
        """Plain data, each section a table beside ``capture``; ``sections``: only those."""
        core = {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "sections"}
        names = self.sections if sections is None else sections
        return {**core, **{name: dataclasses.asdict(self.sections[name]) for name in names}}

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, unknown_sections: bool = False) -> Settings:
        """``unknown_sections``: drop tables (never plain values) that no registered target declares."""
        if not isinstance(data, dict):
            raise TypeError(f"settings: expected a table/dict, got {type(data).__name__}")
        fields = {f.name for f in dataclasses.fields(cls)} - {"sections"}
        types = section_types()
        unknown = sorted(name for name in set(data) - fields - set(types)
                         if not (unknown_sections and isinstance(data[name], dict)))
        if unknown:
            raise ValueError(f"settings: unknown setting(s) {unknown}; known: {sorted(fields | set(types))}")
        core = {name: value for name, value in data.items() if name in fields}
        sections = {name: _build(types[name], value, f"settings.{name}") for name, value in data.items()
                    if name in types and name not in fields}
        return _build(cls, core, "settings", sections=sections)

    @classmethod
    def from_manifest(cls, data: dict[str, Any]) -> Settings:
        """A saved artifact's settings: as ``from_dict``, less the sections fxdeploy no longer has
        and those of targets not installed here (loading checks the artifact's own target first)."""
        return cls.from_dict({k: v for k, v in data.items() if k not in RETIRED} if isinstance(data, dict) else data,
                             unknown_sections=True)


RETIRED = frozenset({"nms"})
"""Settings sections that artifacts saved by older fxdeploy may hold: ``nms`` was never read."""


def _build(cls: type, data: dict[str, Any], where: str, **extra: Any) -> Any:
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
    return cls(**kwargs, **extra)


def _plain(value: Any) -> Any:
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value


_SECTION_TYPES: dict[str, tuple[type, str]] = {}
"""Section name -> (its frozen dataclass, who declared it first)."""
_discover: list[Callable[[], None]] = []


def on_discover(hook: Callable[[], None]) -> None:
    """Called by the target registry: ``hook`` registers every target (and so its sections) once."""
    _discover[:] = [hook]


def check_section(name: str, cls: type, owner: str) -> None:
    """Refuse a section that could not be a table of its own, or that another target owns."""
    core = {f.name for f in dataclasses.fields(Settings)}
    if not name.isidentifier() or name in core:
        raise RegistryError(f"{owner}: settings section {name!r} must be an identifier other than {sorted(core)}")
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or not issubclass(cls, Section):
        raise RegistryError(f"{owner}: settings section {name!r} must be a frozen dataclass deriving from "
                            f"fxdeploy.settings.Section, got {cls!r}")
    known = _SECTION_TYPES.get(name)
    if known is not None and known[0] is not cls:
        raise RegistryError(f"{owner}: settings section {name!r} is already declared by {known[1]} "
                            f"as {known[0].__qualname__}")
    try:
        cls()
    except Exception as exc:  # noqa: BLE001 - a section must build from its defaults alone
        raise RegistryError(f"{owner}: settings section {name!r} does not build from its defaults: {exc}") from exc


def register_section(name: str, cls: type, owner: str) -> None:
    check_section(name, cls, owner)
    _SECTION_TYPES.setdefault(name, (cls, owner))


def section_types() -> dict[str, type]:
    """Every registered target's sections, in registration order."""
    for hook in _discover:
        hook()
    return {name: cls for name, (cls, _) in _SECTION_TYPES.items()}


def _complete(given: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(given, Mapping):
        raise TypeError(f"Settings.sections: expected a mapping of section name to table, got {type(given).__name__}")
    types = section_types()
    unknown = sorted(set(given) - set(types))
    if unknown:
        raise ValueError(f"Settings.sections: unknown section(s) {unknown}; the targets declare {sorted(types)}")
    for name, value in given.items():
        if type(value) is not types[name]:
            raise TypeError(f"Settings.sections[{name!r}]: expected {types[name].__qualname__}, "
                            f"got {type(value).__qualname__}")
    return {name: given[name] if name in given else cls() for name, cls in types.items()}


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
