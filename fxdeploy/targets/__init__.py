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

from fxdeploy import settings as settings_registry
from fxdeploy.errors import LoweringError, RegistryError, TargetUnavailableError
from fxdeploy.targets.base import Lowered, LoweringJob, Target, TargetStatus

__all__ = [
    "ENTRY_POINT_GROUP", "Lowered", "LoweringJob", "Target", "TargetStatus", "all_targets", "check_precision",
    "describe", "get_target", "origin_of", "register_target", "statuses",
]

logger = logging.getLogger(__name__)
ENTRY_POINT_GROUP = "fxdeploy.targets"


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


def check_precision(target: Target, precision: str) -> None:
    """Refuse, before any capture, a precision this target would not run as asked."""
    if precision in target.precisions:
        return
    others = [name for name, other in all_targets().items() if precision in other.precisions]
    raise LoweringError(
        f"Settings.precision: target {target.name!r} supports {list(target.precisions)}, got {precision!r}"
        + (f" ({target.unsupported[precision]})" if precision in target.unsupported else "")
        + (f"; targets with {precision}: {others}" if others else "")
    )


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
