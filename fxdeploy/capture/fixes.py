"""torch.export's suggested fixes for dims the model constrains: applied, warned about, recorded.

A model's code can constrain a dynamic dim: ``x.view(b, -1, 20)`` needs the sample count to be a
multiple of 20, ``torch._check(n >= 3)`` raises its minimum. torch.export then refuses with
"Constraints violated" and prints the dims that would hold (``samples = 20*_samples``,
``batch = Dim('batch', min=3, max=8)``). fxdeploy applies those fixes and captures once more. A
fix that narrows the declared range, or fixes a dim to one size, changes what the artifact
accepts, so each fix is a ``DimWarning`` naming the dim, the declared range and the new one,
and is recorded in the manifest (``info["dim_fixes"]``) and the report. ``Deployed`` then checks
calls against the fixed dims (a sample count that is not a multiple of 20 is an ``InputError``).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any, TypeVar

import torch

from fxdeploy.artifact import true_guards
from fxdeploy.artifact.dims import INT_MAX, finite_or
from fxdeploy.artifact.true_guards import declared as _dims
from fxdeploy.errors import CaptureError, user_stacklevel

T = TypeVar("T")


class DimWarning(UserWarning):
    """The artifact accepts other sizes of a dynamic dim than the ones declared: fxdeploy applied
    torch.export's suggested fix, or torch.export narrowed the range."""


_LINE = re.compile(r"^\s*(?P<name>\w+) = (?P<expr>\S.*?)\s*$")
_DIM = re.compile(r"^Dim\('(?P<name>\w+)'(?:, min=(?P<min>\d+))?(?:, max=(?P<max>\d+))?\)$")
_DERIVED = re.compile(r"^(?:(?P<a>\d+)\*)?(?P<root>\w+)(?: (?P<sign>[+-]) (?P<b>\d+))?$")


def suggested(exc: BaseException | None) -> dict[str, str]:
    """torch.export's "Suggested fixes:" block as {dim name: expression}; empty where it has none."""
    text = str(exc) if exc is not None else ""
    if "Suggested fixes:" not in text:
        return {}
    fixes: dict[str, str] = {}
    for line in text.split("Suggested fixes:", 1)[1].splitlines()[1:]:
        match = _LINE.match(line)
        if match is None:
            break
        fixes[match["name"]] = match["expr"]
    return fixes


def apply(export_shapes: Any, fixes: dict[str, str]) -> tuple[Any, list[str]] | None:
    """``export_shapes`` with each fixed dim replaced (a Dim, a derived dim, or None for a single
    size), and one line per fix for the warning and the manifest; None where a fix is not
    understood or names no dim of ``export_shapes`` (capture then reports torch's own error)."""
    declared = {dim.__name__: dim for dim in _dims(export_shapes)}
    roots: dict[str, Any] = dict(declared)
    built: dict[str, Any] = {}
    limits = _root_limits(fixes, declared)
    for name, expr in sorted(fixes.items(), key=lambda item: not _DIM.match(item[1])):  # new roots first
        value = _build(expr, roots, declared.get(name, limits.get(name)))
        if value is _UNKNOWN:
            return None
        built[name] = roots[name] = value
    if not set(built) & set(declared):
        return None
    lines = [_describe(name, declared.get(name), built[name], fixes[name]) for name in sorted(built)
             if name in declared]
    return _replace(export_shapes, built), lines


def exported_with_fixes(export: Callable[[Any, bool], T], shapes: Any) -> tuple[T, Any, list[str]]:
    """``export(shapes, False)``; where it raises a CaptureError, ``exported_again``. Returns the
    result, the shapes it used and the lines that describe the fixes (none where it needed none)."""
    try:
        return export(shapes, False), shapes, []
    except CaptureError as exc:
        return exported_again(exc, export, shapes)


def exported_again(exc: CaptureError, export: Callable[[Any, bool], T], shapes: Any) -> tuple[T, Any, list[str]]:
    """After ``exc``: where every guard torch.export could not prove holds at every declared size
    (``true_guards``), ``export(shapes, True)``, the guards kept as runtime asserts and no dim
    changed; else, where ``exc``'s cause carries suggested fixes, ``export`` of the fixed shapes;
    else ``exc`` raised again."""
    if shapes is None:
        raise exc
    if true_guards.all_hold(exc.__cause__, shapes):
        return export(shapes, True), shapes, []
    fixed = apply(shapes, suggested(exc.__cause__))
    if fixed is None:
        raise exc
    return export(fixed[0], False), fixed[0], fixed[1]


def fixed_at_example(export_shapes: Any, inputs: list[torch.Tensor], why: str) -> tuple[Any, list[str]] | None:
    """``export_shapes`` (one entry per flat input) with every dynamic dim but dim 0 (the batch) made
    static at the example's size, and one line per dim made so (``why`` says why); None where no
    such dim is left."""
    if not isinstance(export_shapes, list | tuple) or len(export_shapes) != len(inputs):
        return None
    sizes: dict[str, int] = {}
    for spec, x in zip(export_shapes, inputs, strict=True):
        for d, dim in (spec or {}).items():
            if d != 0 and dim is not None:
                sizes.setdefault(str(getattr(dim, "__name__", dim)), int(x.shape[d]))
    if not sizes:
        return None
    kept = [{0: spec[0]} if spec and spec.get(0) is not None else None for spec in export_shapes]
    return kept, [f"dim {name!r} fixed at the example's {size}: {why}; the artifact takes only that size"
                  for name, size in sorted(sizes.items())]


def narrowed(export_shapes: Any, dims: Mapping[str, Any]) -> list[str]:
    """One line per declared dim whose captured range is narrower than declared. torch.export
    narrows without an error where the model's code allows no smaller size (a root of derived
    dims below 2, a size the code specializes); the artifact then refuses those sizes."""
    lines = []
    for dim in {d.__name__: d for d in _dims(export_shapes)}.values():
        captured = dims.get(dim.__name__)
        if captured is None:
            continue
        low, high = getattr(dim, "min", 0), finite_or(getattr(dim, "max", INT_MAX), INT_MAX)
        if captured.min > low or captured.max < high:
            lines.append(f"dim {dim.__name__!r} declared {_range(dim)} narrowed by torch.export to "
                         f"[{captured.min}, {captured.max if captured.max < INT_MAX else 'inf'}]: "
                         "the artifact refuses the sizes outside it")
    return lines


def lifted_minimums(export_shapes: Any, dims: Mapping[str, Any]) -> dict[str, int]:
    """Declared dims whose min torch.export raised to 2 from a declared 1 (or 0), and nothing else:
    its 0/1 specialization (a size that reaches 1 somewhere inside the model, as SegResNet's
    deepest map does at D = 8), which assumes such a size is never 1. The graph often holds there
    all the same (``torch.onnx.export`` keeps the declared range): lower() checks it at the
    declared min. Maps each such dim to the min to check (1)."""
    lifted = {}
    for dim in {d.__name__: d for d in _dims(export_shapes)}.values():
        captured = dims.get(dim.__name__)
        declared_max = finite_or(getattr(dim, "max", INT_MAX), INT_MAX)
        if captured is not None and getattr(dim, "min", 0) <= 1 and captured.min == 2 and captured.max >= min(
            declared_max, INT_MAX - 1
        ):
            lifted[dim.__name__] = 1
    return lifted


def warn(lines: list[str]) -> None:
    for line in lines:
        warnings.warn(line, DimWarning, stacklevel=user_stacklevel())


_UNKNOWN = object()


def _build(expr: str, roots: dict[str, Any], declared: Any) -> Any:
    """The dim ``expr`` names. A new range is met with the declared one: the fix says what the
    model allows, the declaration what the deployer asked for (``max=4`` of a declared [1, 16] is
    [1, 4], not [0, 4])."""
    if expr.isdigit():
        return int(expr)
    match = _DIM.match(expr)
    if match is not None:
        low = max(int(match["min"] or 0), getattr(declared, "min", 0))
        high = min(int(match["max"] or INT_MAX), finite_or(getattr(declared, "max", INT_MAX), INT_MAX))
        if low > high:
            return _UNKNOWN
        return torch.export.Dim(match["name"], **({"min": low} if low else {}),
                                **({"max": high} if high < INT_MAX else {}))
    match = _DERIVED.match(expr)
    if match is None or match["root"] not in roots or isinstance(roots[match["root"]], int):
        return _UNKNOWN
    dim = roots[match["root"]]
    if match["a"]:
        dim = int(match["a"]) * dim
    if match["b"]:
        dim = dim + int(match["b"]) if match["sign"] == "+" else dim - int(match["b"])
    return dim


def _root_limits(fixes: dict[str, str], declared: dict[str, Any]) -> dict[str, Any]:
    """The range a new root must keep so that each declared dim derived from it (``h = 2*_h``) stays
    within its declared range: ``_h`` in [2, 32] for h in [4, 64], where the fix alone ([0, 32])
    let the artifact take (and lower()'s check run) an h of 2 that the deployer ruled out."""
    limits: dict[str, tuple[int, int]] = {}
    for name, expr in fixes.items():
        match = _DERIVED.match(expr)
        if match is None or name not in declared or match["root"] in declared:
            continue
        a, b = int(match["a"] or 1), int(match["b"] or 0) * (-1 if match["sign"] == "-" else 1)
        low, high = getattr(declared[name], "min", 0), finite_or(getattr(declared[name], "max", INT_MAX), INT_MAX)
        root_low = max(0, -((b - low) // a))  # ceil((low - b) / a)
        root_high = (high - b) // a if high < INT_MAX else INT_MAX
        was = limits.get(match["root"], (0, INT_MAX))
        limits[match["root"]] = (max(was[0], root_low), min(was[1], root_high))
    return {root: SimpleNamespace(min=low, max=high) for root, (low, high) in limits.items()}


def _describe(name: str, declared: Any, value: Any, expr: str) -> str:
    was = _range(declared)
    if isinstance(value, int):
        return (f"dim {name!r} declared {was} is fixed to {value} by the model (torch.export's suggested fix, "
                "applied): the artifact takes only that size")
    new = f" ({_range(value)})" if _DIM.match(expr) else ""
    return f"dim {name!r} declared {was} becomes {expr}{new}, torch.export's suggested fix, applied"


def _range(dim: Any) -> str:
    low, high = getattr(dim, "min", 0), finite_or(getattr(dim, "max", INT_MAX), INT_MAX)
    return f"[{low}, {high if high < INT_MAX else 'inf'}]"


def _replace(shapes: Any, built: dict[str, Any]) -> Any:
    if isinstance(shapes, Mapping):
        return type(shapes)((k, _replace(v, built)) for k, v in shapes.items())
    if isinstance(shapes, (list, tuple)):
        return type(shapes)(_replace(v, built) for v in shapes)
    name = getattr(shapes, "__name__", None)
    if name in built and not hasattr(shapes, "root"):
        value = built[name]
        return None if isinstance(value, int) else value
    return shapes
