"""Fingerprints: JSON-able summaries of what decides an artifact, to be hashed into a cache key.

Two flavours, for the two places a cache sits:

- ``model_parts`` looks at an ``nn.Module`` *before* capture: every parameter and buffer (bytes),
  every submodule's class, its plain attributes (thresholds, strides, configs) and hooks, the
  sha256 of the source file that defines each class, the versions of the packages they come
  from, the inputs' structure, dtypes and shapes, ``dynamic_shapes`` and the substitutions. A hit
  skips capture, which is what makes a cached ``lower()`` fast (see ``fxdeploy.cache``).
- ``graph_parts`` looks at a GraphModule (a torch.compile backend's input, or a captured graph):
  its generated code plus the bytes of every tensor it reads.

Tensor bytes are hashed in place (a uint8 view, no copy): ResNet-50's 94 MB take ~0.15 s.
Input *values* are not hashed, only their structure, dtypes and shapes: capture does not depend
on values, and keying on them would make every call with fresh random inputs a miss.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import importlib.metadata
import inspect
import operator
import os
import sys
from collections.abc import Iterable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fxdeploy.errors import FxDeployError

_MODULE_INTERNALS = frozenset(vars(torch.nn.Module())) - {"_forward_hooks", "_forward_pre_hooks"}
_MAX_DEPTH = 4


class UncacheableError(FxDeployError):
    """Something that decides the artifact cannot be fingerprinted; lowering runs uncached."""


def tensor_digest(tensor: torch.Tensor) -> str:
    """sha256 of dtype, shape and bytes (values, not the storage's other contents)."""
    if tensor.is_sparse or tensor.is_quantized or tensor.is_nested or tensor.device.type == "meta":
        raise UncacheableError(f"cannot fingerprint a {tensor.layout}/{tensor.dtype} tensor on {tensor.device}")
    data = tensor.detach()
    data = (data.cpu() if data.device.type != "cpu" else data).contiguous()
    digest = hashlib.sha256(f"{data.dtype}{tuple(data.shape)}".encode())
    if data.numel():
        digest.update(memoryview(data.reshape(-1).view(torch.uint8).numpy()))
    return digest.hexdigest()


def tensors_digest(named: Iterable[tuple[str, torch.Tensor]]) -> str:
    digest = hashlib.sha256()
    for name, tensor in named:
        digest.update(f"{name}={tensor_digest(tensor)};".encode())
    return digest.hexdigest()


@functools.lru_cache(maxsize=1024)
def _file_digest(path: str, mtime_ns: int, size: int) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def code_digest(obj: Any) -> str | None:
    """sha256 of the file that defines ``obj``: edits anywhere in it (helpers too) change the key."""
    try:
        path = inspect.getsourcefile(obj)
    except TypeError:  # built-in
        return None
    if not path or not os.path.isfile(path):
        return None
    stat = os.stat(path)
    return _file_digest(path, stat.st_mtime_ns, stat.st_size)


def package_version(obj: Any) -> str | None:
    return _top_level_version((getattr(obj, "__module__", None) or "").split(".")[0])


@functools.lru_cache(maxsize=256)
def _top_level_version(top: str) -> str | None:
    try:
        return importlib.metadata.version(top) if top and top != "__main__" else None
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return getattr(sys.modules.get(top), "__version__", None)


def callable_parts(fn: Any) -> dict[str, Any]:
    target = getattr(fn, "__func__", fn)
    return {
        "name": f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', type(target).__name__)}",
        "source": code_digest(target),
        "package": package_version(target),
    }


def canonical(value: Any, depth: int = 0) -> Any:
    """A deterministic JSON-able form. Unknown objects give their type and (shallow) attributes."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return repr(value)  # nan and inf stay distinct and JSON-safe
    if isinstance(value, torch.Tensor):
        return {"tensor": tensor_digest(value)}
    if isinstance(value, (torch.dtype, torch.device, torch.Size, enum.Enum)):
        return str(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [canonical(v, depth + 1) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    if isinstance(value, dict):
        return [[str(k), canonical(v, depth + 1)] for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))]
    if inspect.isroutine(value) or isinstance(value, (type, functools.partial)):
        return callable_parts(value)
    if isinstance(value, torch.nn.Module):
        return {"module": callable_parts(type(value))["name"]}  # its contents are hashed as a submodule
    return _object(value, depth)


def _object(value: Any, depth: int) -> Any:
    kind = callable_parts(type(value))
    if dataclasses.is_dataclass(value):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return {"object": kind, "fields": canonical(fields, depth + 1) if depth < _MAX_DEPTH else None}
    if hasattr(value, "__dict__") and depth < _MAX_DEPTH:
        return {"object": kind, "attributes": canonical(vars(value), depth + 1)}
    text = repr(value)
    return {"object": kind, "repr": None if " at 0x" in text else text}


def model_parts(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    dynamic_shapes: Any,
    substitutions: Iterable[Any],
) -> dict[str, Any]:
    """What decides ``lower(model, args, ...)`` short of settings, target and environment."""
    modules = []
    for name, module in model.named_modules(remove_duplicate=False):
        attributes = {k: v for k, v in vars(module).items() if k not in _MODULE_INTERNALS}
        for hooks in ("_forward_hooks", "_forward_pre_hooks"):  # keys are process-wide handle ids
            attributes[hooks] = list(attributes.get(hooks, {}).values())
        modules.append([name, canonical(type(module)), canonical(attributes)])
    classes = {cls for _, m in model.named_modules() for cls in type(m).__mro__ if cls is not object}
    flat, spec = pytree.tree_flatten((args, dict(kwargs or {})))
    return {
        "modules": modules,
        "class_sources": sorted([part["name"], part["source"] or ""] for part in map(callable_parts, classes)),
        "weights": tensors_digest(
            [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]
        ),
        "inputs": {"spec": str(spec), "leaves": [_leaf(x) for x in flat]},
        "dynamic_shapes": canonical(dynamic_shapes),
        "substitutions": [
            [s.name, canonical(s.replacement), canonical(s.unpack) if s.unpack else None] for s in substitutions
        ],
    }


def graph_parts(gm: torch.fx.GraphModule) -> dict[str, Any]:
    """A GraphModule's code and every tensor it reads (parameters, buffers, get_attr constants)."""
    named = dict(gm.named_parameters(remove_duplicate=False))
    named.update(gm.named_buffers(remove_duplicate=False))
    for node in gm.graph.nodes:
        if node.op == "get_attr" and node.target not in named:
            value = operator.attrgetter(node.target)(gm)
            if isinstance(value, torch.Tensor):
                named[node.target] = value
    modules = [[n, repr(m)] for n, m in gm.named_modules() if n]
    return {"code": gm.code, "tensors": tensors_digest(sorted(named.items())), "modules": modules}


def _leaf(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return {"dtype": str(value.dtype), "shape": list(value.shape), "device": value.device.type}
    return canonical(value)
