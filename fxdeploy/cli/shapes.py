"""Reading the command line's shapes: ``--dynamic``, ``--shape`` and inputs that fit a manifest."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from fxdeploy.artifact.dims import size_of
from fxdeploy.artifact.manifest import Manifest


def parse_dynamic(items: Sequence[str]) -> dict[str, dict[int, Any]] | None:
    if not items:
        return None
    shapes: dict[str, dict[int, Any]] = {}
    for item in items:
        parts = item.split(":")
        if len(parts) not in (2, 3, 5):
            raise ValueError(f"--dynamic {item!r}: expected INPUT:DIM, INPUT:DIM:NAME or INPUT:DIM:NAME:MIN:MAX")
        name, dim = parts[0], int(parts[1])
        dim_name = parts[2] if len(parts) >= 3 else f"{name}_{dim}"
        spec: Any = (dim_name, int(parts[3]), int(parts[4])) if len(parts) == 5 else dim_name
        shapes.setdefault(name, {})[dim] = spec
    return shapes



def parse_shapes(items: Sequence[str], model: Any, inputs: tuple[Any, ...]) -> dict[str, dict[int, Any]]:
    """``x:1..8x3x224..640`` → {"x": {0: ("x_0", 1, 8), 2: ("x_2", 224, 640)}}; opt = example size."""
    import inspect

    names = list(inspect.signature(model.forward).bind(*inputs).arguments)
    examples = dict(zip(names, inputs, strict=False))
    shapes: dict[str, dict[int, Any]] = {}
    for item in items:
        name, _, dims = item.partition(":")
        if name not in examples or not dims:
            raise ValueError(f"--shape {item!r}: expected INPUT:DIMS with INPUT one of {names}")
        parts = dims.split("x")
        example = examples[name]
        if len(parts) != example.dim():
            raise ValueError(f"--shape {item!r}: {len(parts)} dims given, input {name!r} has rank {example.dim()}")
        for axis, part in enumerate(parts):
            dim_name, _, span = part.rpartition("=")
            if ".." not in span:
                if int(span) != example.shape[axis]:
                    raise ValueError(
                        f"--shape {item!r}: dim {axis} is fixed at {span}, the example input has {example.shape[axis]}"
                    )
                continue
            bounds = [int(b) for b in span.split("..")]
            low, high = bounds[0], bounds[-1]
            opt = bounds[1] if len(bounds) == 3 else int(example.shape[axis])
            shapes.setdefault(name, {})[axis] = (dim_name or f"{name}_{axis}", low, opt, high)
    return shapes


def random_inputs(manifest: Manifest) -> dict[str, torch.Tensor]:
    """Inputs that fit the manifest: each dynamic dim at its opt value."""
    from fxdeploy.artifact.signature import DTYPES

    feeds: dict[str, torch.Tensor] = {}
    generator = torch.Generator().manual_seed(0)
    for spec in manifest["inputs"]:
        opts = {name: bounds["opt"] for name, bounds in manifest["dims"].items()}
        shape = [size_of(d, opts) for d in spec["shape"]]
        dtype = DTYPES[spec["dtype"]]
        if dtype.is_floating_point:
            feeds[spec["name"]] = torch.randn(shape, generator=generator).to(dtype)
        elif dtype == torch.bool:
            feeds[spec["name"]] = torch.randint(0, 2, shape, generator=generator).bool()
        else:
            feeds[spec["name"]] = torch.randint(0, 10, shape, generator=generator).to(dtype)
    return feeds
