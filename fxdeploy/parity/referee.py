"""The model run in float64, as a referee where lower()'s check finds a tensor past its tolerance.

Eager float32 is the check's reference, and its own rounding can be past the tolerance: torch.cdist
computes more than 25 rows by a matrix product (``|a|^2 + |b|^2 - 2ab``, whose square root at a
near-zero distance is off by 3e-4), a variance of large values loses its digits. An artifact that
computes such a value better is not wrong. So where the check fails, the model runs in float64 on
the same inputs; the artifact passes where, element by element, it is within the tolerance of the
float64 result or no further from it than eager is, or where its value hangs on a comparison at
its edge (``fxdeploy.parity.decision_edges``). Integer and bool outputs are judged too, each element
held to the check's tolerance. Detections (rows) are never refereed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fxdeploy.artifact import structure
from fxdeploy.errors import LoweringError
from fxdeploy.parity import decision_edges


def refereed(
    failure: LoweringError, got: Any, want: Any, referee: Callable[[list[torch.Tensor]], Any] | None,
    inputs: list[torch.Tensor], atol: float, edges: Sequence[Callable[[list[torch.Tensor]], Any]] = (),
) -> tuple[float, dict[str, int]]:
    """``failure`` taken back where, element by element, the artifact is within the tolerance of
    the model run in float64, or no further from it than eager's float32 result is (torch.cdist's
    matrix product, a variance of large values: eager's own rounding is past the tolerance there),
    or its value hangs on a comparison at its edge (``edges``: the model run with its comparisons
    tilted, ``fxdeploy.parity.decision_edges``). The elements excused are counted by rule."""
    if "differs from eager by" not in str(failure):
        raise failure
    exact = _run(referee, inputs)
    tilted = [_run(edge, inputs) for edge in edges]
    runs = [got, want, exact, *tilted]
    if exact is None and (len(tilted) != 2 or None in tilted):
        raise failure  # nothing to referee with
    leaves = [pytree.tree_leaves(structure.dataclasses_to_dicts(v)) if v is not None else None for v in runs]
    if len({len(v) for v in leaves if v is not None}) != 1:
        raise failure
    worst, excused = 0.0, {"eager_rounding": 0, "decision_edges": 0}
    for i, (have, ref) in enumerate(zip(leaves[0], leaves[1], strict=True)):
        if not isinstance(ref, torch.Tensor):
            continue
        if getattr(have, "shape", None) != ref.shape:
            raise failure
        # a run of another shape (a selection the tilt or float64 changed) has no say on this output
        others = [v[i] if v is not None and getattr(v[i], "shape", None) == ref.shape else None for v in leaves[2:]]
        off, closer, edge = _judged(have, ref, others[0], others[1:], atol)
        if bool((off & ~closer & ~edge).any()):
            said = ("the model run in float64 agrees with eager there, not with the artifact" if others[0] is not None
                    else "the model does not run in float64 to referee it")
            raise LoweringError(f"{failure} ({said}; no comparison at its edge decides it)")
        if ref.dtype.is_floating_point and ref.numel():
            worst = max(worst, float((have.double() - ref.double()).abs().max()))
        excused["eager_rounding"] += int((off & closer).sum())
        excused["decision_edges"] += int((off & ~closer).sum())
    return worst, {rule: count for rule, count in excused.items() if count or rule == "eager_rounding"}


def _judged(
    have: torch.Tensor, ref: torch.Tensor, truth: torch.Tensor | None, edges: list[torch.Tensor | None], atol: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Element by element: past the tolerance of eager; no further from float64's value than eager
    (an integer or bool: float64's value); at a comparison's edge. A float's tolerance is relative
    to its largest magnitude; an integer's or a bool's to its own (at least 1), as the check's."""
    a, b = have.double(), ref.double()
    floating = ref.dtype.is_floating_point
    scale = (max(1.0, float(b.abs().max())) if b.numel() else 1.0) if floating else b.abs().clamp(min=1)
    tolerance = atol * scale
    off = (a - b).abs() > tolerance
    none = torch.zeros_like(off)
    if truth is None:
        closer = none
    elif floating:
        closer = (a - truth.double()).abs() <= tolerance + (b - truth.double()).abs()
    else:
        closer = a == truth.double()
    edge = decision_edges.at_an_edge(a, edges, tolerance) if edges and None not in edges else none
    return off, closer, edge


def _run(call: Callable[[list[torch.Tensor]], Any] | None, inputs: list[torch.Tensor]) -> Any:
    """``call(inputs)``, or None where there is none or it raises (a model that does not run in float64)."""
    if call is None:
        return None
    try:
        return call(inputs)
    except Exception:  # noqa: BLE001 - no referee from this run
        return None


def in_float64(
    model: torch.nn.Module, make_call: Callable[[torch.nn.Module], Callable[[list[torch.Tensor]], Any]]
) -> Callable[[list[torch.Tensor]], Any]:
    """The referee: ``make_call`` of a float64 copy of ``model`` (made on first use, the model
    itself untouched), on the inputs with their floats in float64."""
    made: list[Callable[[list[torch.Tensor]], Any]] = []

    def referee(inputs: list[torch.Tensor]) -> Any:
        if not made:
            made.append(make_call(copy.deepcopy(model).double()))
        with torch.no_grad():
            return made[0]([x.double() if x.is_floating_point() else x for x in inputs])

    return referee
