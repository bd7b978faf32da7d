"""The model run in float64, as a referee where lower()'s check finds a tensor past its tolerance.

Eager float32 is the check's reference, and its own rounding can be past the tolerance: torch.cdist
computes more than 25 rows by a matrix product (``|a|^2 + |b|^2 - 2ab``, whose square root at a
near-zero distance is off by 3e-4), a variance of large values loses its digits. An artifact that
computes such a value better is not wrong. So where the check fails, the model runs in float64 on
the same inputs; the artifact passes where, element by element, it is within the tolerance of the
float64 result or no further from it than eager is. Detections (rows) are never refereed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fxdeploy.artifact import structure
from fxdeploy.errors import LoweringError


def refereed(
    failure: LoweringError, got: Any, want: Any, referee: Callable[[list[torch.Tensor]], Any],
    inputs: list[torch.Tensor], atol: float,
) -> tuple[float, dict[str, int]]:
    """``failure`` taken back where the model run in float64 says the artifact is right: every float
    leaf within the tolerance of the float64 result, or no further from it than eager's float32
    result is (torch.cdist's matrix product, a variance of large values: eager's own rounding is
    past the tolerance there). The elements excused that way are counted in the check's entry."""
    if "differs from eager by" not in str(failure):
        raise failure
    try:
        exact = referee(inputs)
    except Exception:  # noqa: BLE001 - a model that does not run in float64 has no referee
        raise failure from None
    leaves = [pytree.tree_leaves(structure.dataclasses_to_dicts(v)) for v in (got, want, exact)]
    if len({len(v) for v in leaves}) != 1:
        raise failure
    worst, excused = 0.0, 0
    for have, ref, truth in zip(*leaves, strict=True):
        if not isinstance(ref, torch.Tensor) or not ref.dtype.is_floating_point:
            continue
        if not isinstance(truth, torch.Tensor) or truth.shape != ref.shape or have.shape != ref.shape:
            raise failure
        a, b, t = have.double(), ref.double(), truth.double()
        scale = max(1.0, float(b.abs().max())) if b.numel() else 1.0
        off = (a - b).abs() > atol * scale
        if bool(((a - t).abs() > atol * scale + (b - t).abs()).any()):
            raise LoweringError(f"{failure} (the model run in float64 agrees with eager there, not with the artifact)")
        worst, excused = max(worst, float((a - b).abs().max()) if b.numel() else 0.0), excused + int(off.sum())
    return worst, {"eager_rounding": excused}


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
