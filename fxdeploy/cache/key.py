"""Cache keys: sha256 over the fingerprint parts, the settings, the target and the environment."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import platform
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from fxdeploy.cache.fingerprint import UncacheableError
from fxdeploy.version import __version__

KEY_FORMAT = 1
"""Bumped when the key's recipe changes, so old entries are never read under a new meaning."""
_PACKAGE = Path(__file__).resolve().parent.parent
_LOWERING_STACK = ("torch", "onnx", "onnxscript", "pnnx")
"""Distributions that write artifacts; each target's runtime version is keyed separately."""


def cache_key(*, target: str, settings: Mapping[str, Any], parts: Mapping[str, Any]) -> str:
    """sha256 of everything that decides the artifact. ``settings['cache']`` is left out: where
    and how much to cache does not change what is built."""
    payload = {
        "format": KEY_FORMAT, "target": target, "runtime_version": runtime_version(target),
        "plugin": plugin_identity(target),
        "settings": {k: v for k, v in settings.items() if k != "cache"},
        "environment": environment(), "parts": parts,
    }
    try:
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise UncacheableError(f"cache key parts are not plain data: {exc}") from exc
    return hashlib.sha256(text.encode()).hexdigest()


def default_root() -> Path:
    return Path(os.environ.get("FXDEPLOY_CACHE_DIR") or Path.home() / ".cache" / "fxdeploy")


def runtime_version(target: str) -> str | None:
    """The version of the runtime that ``target`` lowers for and loads with."""
    from fxdeploy.targets import get_target

    return get_target(target).version()


def plugin_identity(target: str) -> dict[str, str] | None:
    """A plugin target's distribution, version and a digest of its source: an edited or upgraded
    plugin builds other artifacts (None for a built-in target, which fxdeploy's own digest covers)."""
    from fxdeploy.targets import origin_of

    origin = origin_of(target)
    if origin is None:
        return None
    module = origin["entry_point"].partition("=")[2].strip().partition(":")[0].split(".")[0]
    return {**origin, "source": plugin_source_digest(module)}


@functools.lru_cache(maxsize=16)
def plugin_source_digest(module: str) -> str:
    """sha256 over the Python files of a plugin's top-level module or package."""
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return "unknown"
    locations = list(spec.submodule_search_locations or [])
    if locations:
        return package_digest(Path(locations[0]))
    return hashlib.sha256(Path(spec.origin).read_bytes()).hexdigest()


@functools.lru_cache(maxsize=1)
def environment() -> dict[str, Any]:
    """What else decides an artifact: the lowering stack's versions and the machine."""
    versions = {}
    for dist in _LOWERING_STACK:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "fxdeploy": __version__, "fxdeploy_source": package_digest(),
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}", **versions,
        "machine": platform.machine(), "system": platform.system(), "gpu": gpu,
    }


@functools.lru_cache(maxsize=16)
def package_digest(package: Path = _PACKAGE) -> str:
    """sha256 over fxdeploy's own Python files (paths and contents): a change to a pass or a lowering
    changes what gets built, and the version number does not move with every such change (an
    artifact cached before opset 23 was the default kept being served at opset 20). Hashing the
    package's ~100 files takes a few ms, once per process."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()
