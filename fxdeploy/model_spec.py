"""Resolve a CLI model spec, ``path/to/file.py:factory`` or ``package.module:factory``."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

import torch


def load_factory(spec: str) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    """Call the factory; it must return ``(model, example_inputs)``."""
    if ":" not in spec:
        raise ValueError(f"model spec {spec!r} must be 'file.py:factory' or 'package.module:factory'")
    location, _, name = spec.rpartition(":")
    if location.endswith(".py") or Path(location).is_file():
        path = Path(location)
        if not path.is_file():
            raise FileNotFoundError(f"model file {path} does not exist")
        module_name = f"_fxdeploy_model_{path.stem}"
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        if module_spec is None or module_spec.loader is None:
            raise ImportError(f"cannot import {path}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_name] = module
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(location)
    factory = getattr(module, name, None)
    if factory is None:
        raise ValueError(f"{location} has no factory named {name!r}")
    result = factory()
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], torch.nn.Module)):
        raise TypeError(f"factory {spec} must return (model, example_inputs), got {type(result).__name__}")
    model, inputs = result
    return model, inputs if isinstance(inputs, tuple) else (inputs,)
