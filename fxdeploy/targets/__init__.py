"""Target registry: each target bundles a pass pipeline, a lowering and an executor.

Built-in targets are registered explicitly by ``builtin.register_all``; third-party targets come
through the ``fxdeploy.targets`` entry-point group. A duplicate name is an error.

A plugin cannot break the others: one that fails to import, gives no ``Target``, or registers a
name already taken is not registered, and becomes an unavailable row of ``fxdeploy.targets()``
and ``fxdeploy check-env`` naming its entry point, its distribution and the error. Every other
target works, on the first call and every later one.
"""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fxdeploy import settings as settings_registry
from fxdeploy.errors import LoweringError, RegistryError, TargetUnavailableError
from fxdeploy.passes.base import Pass
from fxdeploy.runtime.executor import Executor
from fxdeploy.settings import Settings

logger = logging.getLogger(__name__)
ENTRY_POINT_GROUP = "fxdeploy.targets"


@dataclass
class LoweringJob:
    """Everything a target's lowering gets: the passed graph and how its inputs and outputs look."""

    graph_module: torch.fx.GraphModule
    example_inputs: list[torch.Tensor]
    input_names: list[str]
    output_names: list[str]
    dynamic_shapes: list[dict[int, Any] | None]
    settings: Settings
    out_dir: Path
    # capture's ExportedProgram when no pass changed the graph (the same graph, not traced again)
    exported_program: torch.export.ExportedProgram | None = None


@dataclass
class Lowered:
    files: list[str]
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Target:
    name: str
    pipeline: Sequence[Pass]
    lower: Callable[[LoweringJob], Lowered]
    load: Callable[[Path, dict[str, Any], Settings], Executor]
    version: Callable[[], str | None]
    install_hint: str
    unavailable_reason: Callable[[], str | None] | None = None
    precisions: tuple[str, ...] = ("fp32", "fp16")
    """the ``Settings.precision`` values this target runs as asked; any other is refused, never ignored."""
    sections: Mapping[str, type] = field(default_factory=dict)
    """settings sections this target reads, by name: frozen ``fxdeploy.settings.Section`` dataclasses.
    Each becomes ``settings.<name>``, a ``[name]`` TOML table and ``--name-field`` CLI flags; the
    manifest and the cache key hold the target's own sections. Targets may share a section (same class)."""

    def reason(self) -> str | None:
        """None when the target can run here; otherwise why not, and what to install."""
        if self.unavailable_reason is not None:
            return self.unavailable_reason()
        if self.version() is None:
            return f"not installed: {self.install_hint}"
        return None

    def check_precision(self, precision: str) -> None:
        """Refuse, before any capture, a precision this target would not run as asked."""
        if precision in self.precisions:
            return
        others = [name for name, target in all_targets().items() if precision in target.precisions]
        raise LoweringError(
            f"Settings.precision: target {self.name!r} supports {list(self.precisions)}, got {precision!r}"
            + (f"; targets with {precision}: {others}" if others else "")
        )

    def require(self) -> None:
        reason = self.reason()
        if reason is not None:
            raise TargetUnavailableError(f"target {self.name!r} is unavailable here: {reason}")


@dataclass(frozen=True)
class TargetStatus:
    name: str
    available: bool
    version: str | None
    reason: str | None
    source: str = "fxdeploy"
    """Where the target comes from: fxdeploy, or a plugin's entry point and distribution."""

    def __bool__(self) -> bool:
        return self.available


_TARGETS: dict[str, Target] = {}
_SOURCES: dict[str, dict[str, str]] = {}
"""Target name -> the entry point and distribution that registered it (plugins only)."""
_BROKEN: dict[str, TargetStatus] = {}
"""Plugins that could not be registered, as unavailable rows keyed by entry-point name."""
_LOADED = False
_LOADING = False


def register_target(target: Target) -> Target:
    """Register ``target`` and its settings sections; nothing is registered if either is refused."""
    if target.name in _TARGETS:
        raise RegistryError(f"target {target.name!r} is already registered")
    owner = f"target {target.name!r}"
    for name, cls in target.sections.items():
        settings_registry.check_section(name, cls, owner)
    _TARGETS[target.name] = target
    for name, cls in target.sections.items():
        settings_registry.register_section(name, cls, owner)
    return target


def _ensure_loaded() -> None:
    global _LOADED, _LOADING
    if _LOADED or _LOADING:  # _LOADING: a target module that builds Settings() while it is imported
        return
    from fxdeploy.targets import builtin

    _LOADING = True
    try:
        builtin.register_all(register_target)
    finally:
        _LOADING = False
    _LOADED = True  # only once every built-in registered: a failed import is retried, not hidden
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        origin = _origin(entry_point)
        source = describe(origin)
        try:
            target = _plugin_target(entry_point)
            register_target(target)
        except Exception as exc:  # noqa: BLE001 - a broken plugin is a row, never a crash of every command
            reason = f"plugin {source} failed: {type(exc).__name__}: {exc}"
            logger.warning("fxdeploy target %s", reason)
            key = entry_point.name if entry_point.name not in _TARGETS else f"{entry_point.name} ({source})"
            _BROKEN[key] = TargetStatus(key, False, None, reason, source)
            continue
        _SOURCES[target.name] = origin


def _plugin_target(entry_point: importlib.metadata.EntryPoint) -> Target:
    obj = entry_point.load()
    target = obj() if callable(obj) and not isinstance(obj, Target) else obj
    if not isinstance(target, Target):
        raise RegistryError(f"it gave {type(target).__name__}, expected fxdeploy.targets.Target")
    if target.name != entry_point.name:
        raise RegistryError(f"entry point {entry_point.name!r} provides a target named {target.name!r}")
    return target


def _origin(entry_point: importlib.metadata.EntryPoint) -> dict[str, str]:
    dist = entry_point.dist
    name, version = (dist.name, dist.version) if dist is not None else ("?", "?")
    return {"entry_point": f"{entry_point.name} = {entry_point.value}", "distribution": name, "version": version}


def describe(origin: dict[str, str] | None) -> str:
    """A plugin's origin in words; "fxdeploy" for a built-in target (None)."""
    if origin is None:
        return "fxdeploy"
    return f"entry point '{origin['entry_point']}' of distribution {origin['distribution']} {origin['version']}"


def origin_of(name: str) -> dict[str, str] | None:
    """The entry point and distribution of plugin target ``name``; None for a built-in one."""
    _ensure_loaded()
    return _SOURCES.get(name)


def get_target(name: str) -> Target:
    _ensure_loaded()
    if name in _TARGETS:
        return _TARGETS[name]
    if name in _BROKEN:
        raise TargetUnavailableError(f"target {name!r} is unavailable here: {_BROKEN[name].reason}")
    raise RegistryError(f"unknown target {name!r}; registered: {sorted(_TARGETS)}")


def all_targets() -> dict[str, Target]:
    _ensure_loaded()
    return dict(_TARGETS)


def statuses() -> dict[str, TargetStatus]:
    rows: dict[str, TargetStatus] = {}
    for name, target in all_targets().items():
        try:
            reason, version = target.reason(), target.version()
        except Exception as exc:  # noqa: BLE001 - a broken runtime install is a reason, not a crash
            reason, version = f"runtime fails to import: {type(exc).__name__}: {exc}", None
        rows[name] = TargetStatus(name, reason is None, version, reason, describe(_SOURCES.get(name)))
    return {**rows, **_BROKEN}


settings_registry.on_discover(_ensure_loaded)  # Settings learns the sections of every target, plugins included
