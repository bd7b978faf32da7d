"""Lower one target and check it against eager PyTorch: the one routine behind ``fxdeploy compare``
and ``target="auto"`` (each keeps its own report; lower()'s own check is ``lower_check``)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fxdeploy.parity.outputs import Comparison, Tolerances, compare_outputs, max_abs_error

Transform = Callable[[Any], Any]


@dataclass
class TargetComparison:
    target: str
    status: str
    """pass | fail (outputs differ) | error (lowering or running failed) | unavailable"""
    reason: str = ""
    results: list[Comparison] = field(default_factory=list)
    lower_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == "pass"

    @property
    def max_abs(self) -> float | None:
        return max_abs_error(self.results) if self.results else None


@dataclass
class Run:
    """One set of inputs to compare on: the example, or the example at another batch size."""

    batch: int | None
    args: tuple[Any, ...]
    reference: Any = None
    kwargs: dict[str, Any] = field(default_factory=dict)


def check_target(
    name: str, lower: Callable[[], Any], runs: list[Run], tol: Tolerances, transform: Transform | None = None,
) -> tuple[TargetComparison, Any]:
    """Lower one target (``lower()``) and check its outputs on each run against the run's eager
    reference: the one "lower a target and compare" routine, for ``compare`` and ``target="auto"``.
    Returns the row (pass, fail or error, with the reason) and the Deployed (None on an error)."""
    start = time.perf_counter()
    results: list[Comparison] = []
    try:
        deployed = lower()
        lower_s = time.perf_counter() - start
        for run in runs:
            got = deployed(*run.args, **run.kwargs)
            got = transform(got) if transform is not None else got
            found = compare_outputs(run.reference, got, tol)
            if run.batch is not None:
                found = [dataclasses.replace(r, name=f"{r.name} @ batch {run.batch}") for r in found]
            results += found
    except Exception as exc:  # noqa: BLE001 - a target that cannot lower or run is a failed row, not a crash
        return TargetComparison(name, "error", f"{type(exc).__name__}: {exc}"[:2000], results), None
    status = "pass" if all(r.ok for r in results) else "fail"
    return TargetComparison(name, status, "", results, lower_s), deployed
