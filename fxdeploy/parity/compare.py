"""``compare(model, inputs, targets=[...])``: lower to each target and check it against eager."""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from fxdeploy import api
from fxdeploy.parity.batches import batch_dims, rebatch
from fxdeploy.parity.outputs import Comparison, Tolerances, compare_outputs, max_abs_error, reference_outputs
from fxdeploy.settings import Settings
from fxdeploy.targets import statuses as all_statuses

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
class CompareReport:
    model: str
    input_shapes: list[tuple[int, ...]]
    tolerances: Tolerances
    targets: list[TargetComparison]
    batches: list[int] = field(default_factory=list)
    """The batch sizes compared at (the example's rows cycled); empty: the example as given."""

    @property
    def ok(self) -> bool:
        return bool(self.targets) and all(t.ok for t in self.targets)

    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def __str__(self) -> str:
        tol = self.tolerances
        lines = [
            f"compare {self.model} on inputs {self.input_shapes}"
            + (f" at batch {', '.join(map(str, self.batches))}" if self.batches else "")
            + " against eager PyTorch "
            f"(atol {tol.atol:g}, rtol {tol.rtol:g}; detections: IoU >= {tol.iou:g}, score atol {tol.score_atol:g})"
        ]
        for t in self.targets:
            error = "" if t.max_abs is None else f"  max abs {t.max_abs:.3g}"
            timing = "" if t.lower_s is None else f"  lowered in {t.lower_s:.2f} s"
            lines.append(f"  {t.target}: {t.status.upper()}{error}{timing}")
            if t.reason:
                lines.extend(f"    {line}" for line in t.reason.splitlines())
            for r in t.results:
                mark = "ok  " if r.ok else "FAIL"
                lines.append(f"    {mark} {r.name} [{r.kind}] max abs {r.max_abs:.3g}"
                             + (f" - {r.detail}" if r.detail else ""))
        passed = sum(t.ok for t in self.targets)
        lines.append(f"result: {'PASS' if self.ok else 'FAIL'} ({passed}/{len(self.targets)} targets pass)")
        return "\n".join(lines)


def compare(
    model: torch.nn.Module,
    inputs: tuple[Any, ...] | torch.Tensor,
    targets: Sequence[str],
    *,
    tolerances: Tolerances | None = None,
    settings: Settings | None = None,
    dynamic_shapes: Any = None,
    substitutions: dict[Any, Any] | None = None,
    transform: Mapping[str, Transform] | None = None,
    batches: Sequence[int] | None = None,
) -> CompareReport:
    """Lower ``model`` to each target and compare its outputs on ``inputs`` with eager PyTorch.

    Lowering runs with ``verify=False``: this comparison *is* the verification, and lower's own
    element-wise check would raise before a report (or a detection-aware match) could be made.
    ``transform`` maps a target name to a function applied to that target's outputs; it exists so
    tests can fake a broken target without registering one.

    ``batches``: compare at each of these batch sizes, the example's rows cycled along dim 0, each
    target lowered once; without ``dynamic_shapes``, dim 0 of every tensor input is one dynamic
    ``batch`` dim. Each result's name says its batch.
    """
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    tol = tolerances or Tolerances()
    statuses = all_statuses()
    unknown = [t for t in targets if t not in statuses]
    if unknown or not targets:
        raise ValueError(f"unknown target(s) {unknown}; registered: {sorted(statuses)}")
    lower_settings = dataclasses.replace(settings or Settings(), verify=False)
    batches = list(batches or [])
    if batches and dynamic_shapes is None:
        dynamic_shapes = batch_dims(args, batches)
    runs = [Run(b, rebatch(args, b)) for b in batches] or [Run(None, args)]
    for run in runs:
        run.reference = reference_outputs(model, run.args)
    rows = []
    for name in targets:
        status = statuses[name]
        if not status.available:
            rows.append(TargetComparison(name, "unavailable", status.reason or "unavailable"))
            continue
        lower = functools.partial(api.lower, model, args, target=name, dynamic_shapes=dynamic_shapes,
                                  settings=lower_settings, substitutions=substitutions)
        rows.append(check_target(name, lower, runs, tol, (transform or {}).get(name))[0])
    shapes = [tuple(x.shape) for x in args if isinstance(x, torch.Tensor)]
    return CompareReport(type(model).__name__, shapes, tol, rows, batches)


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
