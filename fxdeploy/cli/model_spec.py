"""Resolve a CLI model spec, ``path/to/file.py:factory`` or ``package.module:factory``."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

import torch

from fxdeploy.cli.checks import UsageError

SUBSTITUTIONS_ATTRIBUTE = "FXDEPLOY_SUBSTITUTIONS"
"""A module-level dict in the model's file that the CLI passes to ``lower(substitutions=...)``."""


def call_factory(spec: str, what: str = "model") -> Any:
    """Import the spec's module and call its factory; ValueError saying where it failed."""
    module, name = _import(spec)
    factory = getattr(module, name, None)
    if factory is None:
        raise ValueError(f"{spec.rpartition(':')[0]} has no factory named {name!r}")
    try:
        return factory()
    except Exception as exc:  # noqa: BLE001 - the user's code: say where it failed, keep the cause
        raise ValueError(f"{what} spec {spec!r}: the factory raised {type(exc).__name__}: {exc}") from exc


def load_factory(spec: str) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    """Call the factory; it must return ``(model, example_inputs)``."""
    result = call_factory(spec)
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], torch.nn.Module)):
        raise TypeError(f"factory {spec} must return (model, example_inputs), got {type(result).__name__}")
    model, inputs = result
    return model, inputs if isinstance(inputs, tuple) else (inputs,)


def load_model(spec: str) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    """``load_factory`` for a command: a spec that does not give a model is a bad argument, said
    in one line before any lowering."""
    try:
        return load_factory(spec)
    except (ValueError, TypeError, ImportError, OSError) as exc:
        raise UsageError(str(exc)) from exc


def load_substitutions(spec: str) -> dict[Any, Any] | None:
    """The model file's own substitutions, if it declares ``FXDEPLOY_SUBSTITUTIONS``."""
    module, _ = _import(spec)
    return getattr(module, SUBSTITUTIONS_ATTRIBUTE, None)


def _import(spec: str) -> tuple[Any, str]:
    if ":" not in spec:
        raise ValueError(f"model spec {spec!r} must be 'file.py:factory' or 'package.module:factory'")
    location, _, name = spec.rpartition(":")
    if location.endswith(".py") or Path(location).is_file():
        path = Path(location)
        if not path.is_file():
            raise FileNotFoundError(f"model file {path} does not exist")
        digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
        module_name = f"_fxdeploy_model_{digest}"
        if module_name in sys.modules:
            return sys.modules[module_name], name
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        if module_spec is None or module_spec.loader is None:
            raise ImportError(f"cannot import {path}")
        module = importlib.util.module_from_spec(module_spec)
        folder = str(path.resolve().parent)
        if folder not in sys.path:  # as `python file.py` does: a model file imports the files beside it
            sys.path.insert(0, folder)
        sys.modules[module_name] = module
        try:
            module_spec.loader.exec_module(module)
        except BaseException as exc:
            del sys.modules[module_name]  # a fixed file is imported again, not served half-run
            if isinstance(exc, Exception):
                raise _import_failed(spec, exc, folder) from exc
            raise
    else:
        try:
            module = importlib.import_module(location)
        except Exception as exc:  # noqa: BLE001 - the user's code: say where it failed, keep the cause
            raise _import_failed(spec, exc, None) from exc
    return module, name


class ModelImportError(ImportError):
    """The model's module failed to import: the spec, the cause and what to do, in one line."""


def _import_failed(spec: str, exc: Exception, folder: str | None) -> ModelImportError:
    message = f"model spec {spec!r}: importing it failed with {type(exc).__name__}: {exc}"
    if isinstance(exc, ModuleNotFoundError) and folder is not None:
        message += (
            f". The file's folder ({folder}) is on sys.path, but not its parents: for a file inside a "
            "package, run `python -m fxdeploy` from the package's root and name the model as "
            "package.module:factory"
        )
    return ModelImportError(message)
