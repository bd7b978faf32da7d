"""Reading the command line's shapes: ``--dynamic``, ``--shape`` and inputs that fit a manifest."""

from __future__ import annotations

from argparse import ArgumentTypeError
from collections.abc import Sequence
from typing import Any

import torch

from fxdeploy.artifact.dims import size_of
from fxdeploy.artifact.manifest import Manifest
from fxdeploy.cli.checks import UsageError

DYNAMIC_FORM = "INPUT:DIM, INPUT:DIM:NAME or INPUT:DIM:NAME:MIN:MAX (MIN < MAX)"
SHAPE_FORM = "INPUT:DIMS, each dim N, LOW..HIGH or LOW..OPT..HIGH, optionally NAME= first, joined by x"

DynamicItem = tuple[str, int, Any]
"""(input, dim, "name" or ("name", min, max)): one ``--dynamic``, as ``dynamic_item`` reads it."""
ShapeItem = tuple[str, list[Any]]
"""(input, per dim: a fixed int or (name, low, opt or None, high)): one ``--shape``."""


def dynamic_item(text: str) -> DynamicItem:
    """One ``--dynamic`` value, every field checked (argparse's ``type=``)."""
    parts = text.split(":")
    if len(parts) not in (2, 3, 5) or not parts[0]:
        raise ArgumentTypeError(f"{text!r}: {len(parts)} field(s); expected {DYNAMIC_FORM}")
    name, dim = parts[0], _integer(text, "DIM", parts[1], low=0)
    dim_name = parts[2] if len(parts) >= 3 else f"{name}_{dim}"
    if not dim_name.isidentifier():
        raise ArgumentTypeError(f"{text!r}: NAME {dim_name!r} is not a Python identifier; expected {DYNAMIC_FORM}")
    if len(parts) != 5:
        return name, dim, dim_name
    low, high = _integer(text, "MIN", parts[3], low=0), _integer(text, "MAX", parts[4], low=1)
    if low >= high:
        raise ArgumentTypeError(f"{text!r}: MIN {low} is not below MAX {high}; expected {DYNAMIC_FORM}")
    return name, dim, (dim_name, low, high)


def _integer(text: str, field: str, value: str, low: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ArgumentTypeError(f"{text!r}: {field} {value!r} is not an integer; expected one >= {low}") from None
    if number < low:
        raise ArgumentTypeError(f"{text!r}: {field} {number} is below {low}; expected an integer >= {low}")
    return number


def parse_dynamic(items: Sequence[str | DynamicItem]) -> dict[str, dict[int, Any]] | None:
    if not items:
        return None
    shapes: dict[str, dict[int, Any]] = {}
    for item in items:
        name, dim, spec = dynamic_item(item) if isinstance(item, str) else item
        if dim in shapes.get(name, {}):
            raise UsageError(f"argument --dynamic: dim {dim} of {name!r} is given twice; expected each once")
        shapes.setdefault(name, {})[dim] = spec
    return shapes


def shape_item(text: str) -> ShapeItem:
    """One ``--shape`` value, its syntax and every range checked (argparse's ``type=``); whether it
    fits the model's inputs is ``parse_shapes``' to say, once the model is imported."""
    name, _, dims = text.partition(":")
    if not name or not dims:
        raise ArgumentTypeError(f"{text!r}: expected {SHAPE_FORM}")
    parsed: list[Any] = []
    for axis, part in enumerate(dims.split("x")):
        dim_name, _, span = part.rpartition("=")
        if dim_name and not dim_name.isidentifier():
            raise ArgumentTypeError(f"{text!r}: dim {axis} name {dim_name!r} is not a Python identifier")
        bounds = [_integer(text, f"dim {axis}", b, low=0) for b in span.split("..")]
        if len(bounds) == 1:
            parsed.append(bounds[0])
            continue
        if len(bounds) > 3 or bounds != sorted(bounds) or bounds[0] == bounds[-1]:
            raise ArgumentTypeError(f"{text!r}: dim {axis} range {span!r}; expected LOW..HIGH or LOW..OPT..HIGH "
                                    "with LOW <= OPT <= HIGH and LOW < HIGH")
        parsed.append((dim_name or f"{name}_{axis}", bounds[0], bounds[1] if len(bounds) == 3 else None, bounds[-1]))
    return name, parsed


def parse_shapes(
    items: Sequence[str | ShapeItem], model: Any, inputs: tuple[Any, ...],
) -> dict[str, dict[int, Any]]:
    """``x:1..8x3x224..640`` → {"x": {0: ("x_0", 1, 2, 8), ...}}; opt = the example's size unless given."""
    names = input_names(model, inputs)
    examples = dict(zip(names, inputs, strict=False))
    shapes: dict[str, dict[int, Any]] = {}
    for item in items:
        name, dims = shape_item(item) if isinstance(item, str) else item
        if name not in examples:
            raise UsageError(f"argument --shape: input {name!r} is not one of the model's inputs {names}")
        example = examples[name]
        if not isinstance(example, torch.Tensor):
            raise UsageError(f"argument --shape: input {name!r} is not a tensor; use --dynamic or the Python API")
        if len(dims) != example.dim():
            raise UsageError(f"argument --shape: {name}: {len(dims)} dims given, the example input has rank "
                             f"{example.dim()}")
        for axis, dim in enumerate(dims):
            size = int(example.shape[axis])
            if isinstance(dim, int):
                if dim != size:
                    raise UsageError(f"argument --shape: {name} dim {axis} is fixed at {dim}, the example input "
                                     f"has {size}; expected {size} or a range")
                continue
            dim_name, low, opt, high = dim
            if not low <= size <= high:
                raise UsageError(f"argument --shape: {name} dim {axis} range {low}..{high} leaves out the "
                                 f"example's size {size}; expected a range that holds it")
            shapes.setdefault(name, {})[axis] = (dim_name, low, size if opt is None else opt, high)
    return shapes


def check_dynamic(dynamic: dict[str, dict[int, Any]] | None, model: Any, inputs: tuple[Any, ...]) -> None:
    """Each ``--dynamic`` input is one of the model's, and each dim within its rank."""
    names = input_names(model, inputs)
    examples = dict(zip(names, inputs, strict=False))
    for name, dims in (dynamic or {}).items():
        if name not in examples:
            raise UsageError(f"argument --dynamic: input {name!r} is not one of the model's inputs {names}")
        if not isinstance(examples[name], torch.Tensor):
            continue  # a nested input: lower() says what its dynamic shapes must look like
        rank = examples[name].dim()
        for dim in dims:
            if dim >= rank:
                raise UsageError(f"argument --dynamic: {name} has rank {rank}, so dim {dim} does not exist; "
                                 f"expected a dim below {rank}")


def input_names(model: Any, inputs: tuple[Any, ...]) -> list[str]:
    """The model's input names, as ``forward``'s signature binds the example inputs."""
    import inspect

    try:
        return list(inspect.signature(model.forward).bind(*inputs).arguments)
    except TypeError as exc:
        raise UsageError(f"the factory's example inputs do not fit {type(model).__name__}.forward: {exc}") from exc


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
