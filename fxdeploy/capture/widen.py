"""A dynamic dim whose example size is 1: capture on the example repeated to size 2.

torch.export specializes a size of 0 or 1 (it cannot tell a broadcast from a batch), so a batch of
one, the most common example there is, would fix the batch it was declared dynamic for. fxdeploy
repeats each such input along the dim (``cat([x, x], dim)``: the same image twice, the same
tokens twice) and captures on that; the artifact still takes size 1, which ``lower()``'s check
runs. What was widened is logged and recorded in the manifest (``info["widened_dims"]``).
A size of 0 cannot be widened by repeating it and is still refused with the reason.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from typing import Any

import torch


def widen(
    args: tuple[Any, ...], kwargs: dict[str, Any], export_shapes: Any, forward: Any
) -> tuple[tuple[Any, ...], dict[str, Any], list[str]]:
    """(args, kwargs, names of the dims widened): every tensor input repeated to size 2 along each
    dim named by a dynamic dim that has size 1 in some input and may be 2 or more."""
    if export_shapes is None:
        return args, kwargs, []
    bound = inspect.signature(forward).bind(*args, **kwargs) if isinstance(export_shapes, Mapping) else None
    specs = export_shapes.items() if bound is not None else enumerate(export_shapes)
    values = bound.arguments if bound is not None else list(args)
    names = sorted({
        dim.__name__ for key, spec in specs for d, dim in _plain_dims(spec)
        if isinstance(values[key], torch.Tensor) and values[key].shape[d] == 1 and _may_grow(dim)
    })
    if not names:
        return args, kwargs, []
    specs = export_shapes.items() if bound is not None else enumerate(export_shapes)
    for key, spec in specs:
        for d, dim in _plain_dims(spec):
            if dim.__name__ in names and isinstance(values[key], torch.Tensor) and values[key].shape[d] == 1:
                values[key] = torch.cat([values[key], values[key]], d)
    if bound is not None:
        return tuple(bound.args), dict(bound.kwargs), names
    return tuple(values), kwargs, names


def _plain_dims(spec: Any) -> Iterator[tuple[int, Any]]:
    """(tensor dim, torch.export Dim) for the plain named dims of one input's spec (not derived
    dims such as ``32 * h``, whose size 1 cannot happen)."""
    items = spec.items() if isinstance(spec, Mapping) else enumerate(spec or ())
    for d, dim in items:
        if dim is not None and hasattr(dim, "__name__") and not hasattr(dim, "root"):
            yield int(d), dim


def _may_grow(dim: Any) -> bool:
    high = getattr(dim, "max", None)
    return not isinstance(high, int) or high >= 2
