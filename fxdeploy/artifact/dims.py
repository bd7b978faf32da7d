"""Dynamic dimensions: the user's spellings, torch.export's Dims, and the manifest's ranges."""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.export import Dim

from fxdeploy.errors import InputError

INT_MAX = 2**31 - 1
_SYMBOL = re.compile(r"\b[su]\d+\b")
_DERIVED = re.compile(r"^(?:(\d+)\*)?([A-Za-z_]\w*)(?:([+-])(\d+))?$")


@dataclass(frozen=True)
class DimRange:
    name: str
    min: int
    max: int
    opt: int

    def to_dict(self) -> dict[str, int]:
        return {"min": self.min, "opt": self.opt, "max": self.max}


def _dim_from(spec: Any, where: str, cache: dict[str, Any], opts: dict[str, int]) -> Any:
    """One dim's spec: a name, a Dim, (name, min, max), (name, min, opt, max) or a dict."""
    if spec is None or isinstance(spec, type(Dim.AUTO)):
        return spec
    if hasattr(spec, "__name__") and hasattr(spec, "min"):  # a torch.export Dim
        return spec
    if isinstance(spec, str):
        name, lo, opt, hi = spec, 1, None, INT_MAX
    elif isinstance(spec, Mapping):
        name, lo, hi = spec["name"], int(spec.get("min", 1)), int(spec.get("max", INT_MAX))
        opt = spec.get("opt")
    elif isinstance(spec, Sequence) and len(spec) in (3, 4) and isinstance(spec[0], str):
        name, lo, hi = spec[0], int(spec[1]), int(spec[-1])
        opt = spec[2] if len(spec) == 4 else None
    else:
        raise InputError(
            f"dynamic_shapes{where}: expected a dim name, a torch.export.Dim, (name, min, max) or "
            f"(name, min, opt, max); got {spec!r}"
        )
    if not name.isidentifier():
        raise InputError(f"dynamic_shapes{where}: dim name must be an identifier, got {name!r}")
    if opt is not None:
        opts[name] = int(opt)
    if name in cache:
        if (cache[name].min, cache[name].max) != (lo, hi):
            raise InputError(
                f"dynamic_shapes{where}: dim {name!r} is used with range [{lo}, {hi}] here and "
                f"[{cache[name].min}, {cache[name].max}] elsewhere"
            )
        return cache[name]
    cache[name] = Dim(name, min=lo, max=hi)
    return cache[name]


def to_export_dynamic_shapes(
    dynamic_shapes: Any, forward: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, dict[str, int]]:
    """Return (torch.export dynamic_shapes, {dim name: opt value given by the user})."""
    if dynamic_shapes is None:
        return None, {}
    cache: dict[str, Any] = {}
    opts: dict[str, int] = {}

    def per_input(spec: Any, where: str) -> Any:
        if spec is None:
            return None
        if isinstance(spec, Mapping):
            return {int(d): _dim_from(s, f"{where}[{d}]", cache, opts) for d, s in spec.items()}
        if isinstance(spec, (list, tuple)):
            return type(spec)(_dim_from(s, f"{where}[{i}]", cache, opts) for i, s in enumerate(spec))
        raise InputError(f"dynamic_shapes{where}: expected a dict or tuple of dims, got {spec!r}")

    if isinstance(dynamic_shapes, Mapping):
        names = list(inspect.signature(forward).bind(*args, **kwargs).arguments)
        unknown = sorted(set(dynamic_shapes) - set(names))
        if unknown:
            raise InputError(
                f"dynamic_shapes names {unknown} are not inputs of the model; inputs are {names}"
            )
        return {n: per_input(dynamic_shapes.get(n), f"[{n!r}]") for n in names}, opts
    return type(dynamic_shapes)(
        per_input(s, f"[{i}]") for i, s in enumerate(dynamic_shapes)
    ), opts


def symbolic_dims(fake: Any, names: dict[str, str]) -> list[int | str]:
    """Shape of one input as the manifest writes it: ints, a dynamic dim's name (``batch``), or
    a dim derived from one (``32*h``, ``2*h + 1``: torch.export's ``32 * Dim("h")``)."""
    if not isinstance(fake, torch.Tensor):
        return []
    return [expression(size, names) if _symbolic(size) else int(size) for size in fake.shape]


def _symbolic(size: Any) -> bool:
    """A SymInt still free (one that capture specialized to a number is static)."""
    return isinstance(size, torch.SymInt) and not size.node.expr.is_number


def expression(size: torch.SymInt, names: dict[str, str]) -> str:
    """A symbolic size with its symbols (s0, s77) replaced by the user's dim names."""
    return _SYMBOL.sub(lambda m: names.get(m.group(0), m.group(0)), str(size.node.expr))


@functools.cache
def parse(entry: str) -> tuple[int, str, int]:
    """A manifest dim as (a, root, b), meaning ``a * root + b``: 'h' is (1, 'h', 0), '32*h' is (32, 'h', 0)."""
    match = _DERIVED.match(entry.replace(" ", ""))
    if match is None:
        raise InputError(f"dim {entry!r} is neither a dim name nor of the form a*name + b")
    a, root, sign, b = match.groups()
    if a is not None and int(a) == 0:
        raise InputError(f"dim {entry!r} multiplies its root by 0")
    return int(a or 1), root, (-1 if sign == "-" else 1) * int(b or 0)


def size_of(entry: int | str, sizes: Mapping[str, int]) -> int:
    """The size of one manifest dim, given a size for each root dim."""
    if isinstance(entry, int):
        return entry
    a, root, b = parse(entry)
    return a * sizes[root] + b


def root_value(entry: str, size: int) -> int | None:
    """The root dim's value for which ``entry`` has ``size``, or None when no integer one exists."""
    a, _, b = parse(entry)
    return (size - b) // a if (size - b) % a == 0 else None


def dim_ranges(
    ranges: Mapping[Any, Any], names: dict[str, str], opts: dict[str, int], observed: dict[str, int]
) -> dict[str, DimRange]:
    """Map each root symbol's value range onto its user-facing name (derived dims have none of their own)."""
    result: dict[str, DimRange] = {}
    for symbol, value_range in ranges.items():
        if not getattr(symbol, "is_Symbol", False):
            continue  # 32*s39: a derived dim, bounded through its root
        if not str(symbol).startswith("s"):
            continue  # a data-dependent value (u0, zuf0), not an input dim
        if str(symbol) not in names:
            continue  # a size inside the graph (a retrace's own symbol), not an input's
        name = names.get(str(symbol), str(symbol))
        lo = int(value_range.lower)
        hi = finite_or(value_range.upper, INT_MAX)
        opt = opts.get(name, observed.get(name, lo))
        result[name] = DimRange(name, lo, hi, opt)
    return result


def export_dim(entry: str, roots: Mapping[str, Any]) -> Any:
    """A manifest dim back as a torch.export dim: a Dim, or a derived ``a * Dim + b``."""
    a, root, b = parse(entry)
    dim = roots[root]
    if a != 1:
        dim = a * dim
    return dim + b if b else dim


def finite_or(bound: Any, default: int) -> int:
    """sympy/torch infinities (oo, int_oo) become ``default``; finite bounds are clamped to it."""
    try:
        return min(int(bound), default)
    except (TypeError, ValueError, AttributeError, OverflowError):
        return default
