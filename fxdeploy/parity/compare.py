"""``compare(model, inputs, targets=[...])``: lower to each target and check it against eager."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from fxdeploy import api
from fxdeploy.parity.batches import batch_dims, rebatch
from fxdeploy.parity.check import Run, TargetComparison, Transform, check_target
from fxdeploy.parity.outputs import Tolerances, reference_outputs
from fxdeploy.settings import Settings
from fxdeploy.targets import statuses as all_statuses


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
