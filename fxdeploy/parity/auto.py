"""``target="auto"``: lower to every available target, drop those that differ from eager, keep the
fastest on the example inputs.

The candidates are timed interleaved, in rotating rounds, after one warm-up each: on a shared,
noisy machine a slow spell then hits every candidate instead of whichever ran during it, so the
medians are comparable and the pick is the real fastest within the noise. The decision table
(per target: status, parity error, median, reason) goes into ``manifest["info"]["auto"]``, so
the saved artifact says why it is what it is.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from fxdeploy.bench.timing import Budget, measure_interleaved, pinned_threads, summarize
from fxdeploy.deployed import Deployed
from fxdeploy.errors import LoweringError
from fxdeploy.parity.check import Run, TargetComparison, check_target
from fxdeploy.parity.outputs import Tolerances, reference_outputs
from fxdeploy.settings import Settings
from fxdeploy.targets import statuses as all_statuses

logger = logging.getLogger(__name__)


def lower_auto(
    lower: Callable[..., Deployed],
    model: torch.nn.Module,
    inputs: tuple[Any, ...] | torch.Tensor,
    dynamic_shapes: Any = None,
    settings: Settings | None = None,
    *,
    kwargs: dict[str, Any] | None = None,
    substitutions: dict[Callable[..., Any], Any] | None = None,
    candidates: Sequence[str] | None = None,
    warmup_s: float = 0.5,
    measure_s: float = 1.5,
    min_runs: int = 10,
    rounds: int = 5,
    tolerances: Tolerances | None = None,
    transform: Mapping[str, Callable[[Any], Any]] | None = None,
) -> Deployed:
    """Lower to each candidate (default: every registered target), check parity, time, keep one.

    Each candidate is lowered exactly as ``lower(target=name)`` would (same settings, so with
    ``verify`` its own shape checks run, and a candidate whose check raises is dropped with the
    reason). Parity is then checked here against eager PyTorch on the example inputs, detections
    the detection-aware way. ``transform`` (target name to a function of its outputs) exists for
    tests that fake a broken target. ``lower`` is ``fxdeploy.lower`` for one target, passed in by
    it: this module sits below ``fxdeploy.api`` and never imports it.
    """
    settings = settings or Settings()
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    tol = tolerances or Tolerances(atol=settings.atol)
    names, statuses = _candidates(candidates)
    runs = [Run(None, args, reference_outputs(model, args, kwargs), dict(kwargs or {}))]
    table: dict[str, dict[str, Any]] = {}
    passing: dict[str, tuple[Deployed, list[Any]]] = {}
    for name in names:
        entry = table[name] = _entry(name, statuses[name].reason)
        if not statuses[name].available:
            continue
        row, deployed = check_target(
            name, functools.partial(lower, model, args, target=name, dynamic_shapes=dynamic_shapes,
                                    settings=settings, kwargs=kwargs, substitutions=substitutions),
            runs, tol, (transform or {}).get(name),
        )
        if _parity(entry, row):  # a target that cannot take this model, or differs from eager, is dropped
            passing[name] = (deployed, row.results)
    if not passing:
        summary = "; ".join(f"{n}: {e['status']} ({e['reason']})" for n, e in table.items())
        raise LoweringError(f"target='auto': no target lowered this model and matched eager PyTorch: {summary}")
    budget = Budget(warmup_s, 3, measure_s, min_runs, rounds)
    chosen, why = _pick(passing, table, args, kwargs or {}, budget, settings.threads)
    deployed, results = passing[chosen]
    deployed.executor.timings.reset()
    _record(deployed, chosen, why, budget, table, results)
    logger.info("target='auto' chose %s: %s", chosen, why)
    return deployed


def _candidates(candidates: Sequence[str] | None) -> tuple[list[str], dict[str, Any]]:
    """The targets to try (``candidates``, by default every registered target), and every
    registered target's status."""
    statuses = all_statuses()
    names = list(candidates) if candidates is not None else list(statuses)
    unknown = [n for n in names if n not in statuses]
    if unknown:
        raise ValueError(f"unknown target(s) {unknown}; registered: {sorted(statuses)}")
    return names, statuses


def _entry(name: str, reason: str | None) -> dict[str, Any]:
    """A candidate's row of the decision table before it is tried: unavailable, for ``reason``."""
    return {"target": name, "status": "unavailable", "parity_error": None,
            "median_ms": None, "p90_ms": None, "cv": None, "reason": reason}


def _parity(entry: dict[str, Any], row: TargetComparison) -> bool:
    """Record a candidate's check in its table ``entry``; True where it lowered, ran and matched."""
    if row.status == "error":
        entry.update(status="failed", reason=row.reason[:1000])
        return False
    entry["parity_error"] = _finite(row.max_abs)
    bad = [f"{r.name}: {r.detail}" for r in row.results if not r.ok]
    if bad:
        entry.update(status="parity_failed", reason="; ".join(bad)[:1000])
        return False
    entry.update(status="ok", reason=None)
    return True


def _record(
    deployed: Deployed, chosen: str, why: str, budget: Budget, table: dict[str, dict[str, Any]], results: list[Any],
) -> None:
    """The decision table and the chosen target's parity go into the manifest's ``info["auto"]``."""
    deployed.manifest["info"]["auto"] = {
        "chosen": chosen, "why": why, "budget": budget.as_dict(), "candidates": list(table.values()),
        "parity": {r.name: _finite(r.max_abs) for r in results},
    }


def _pick(
    passing: dict[str, tuple[Deployed, list[Any]]], table: dict[str, dict[str, Any]], args: tuple[Any, ...],
    kwargs: dict[str, Any], budget: Budget, threads: int,
) -> tuple[str, str]:
    """Time the parity-passing candidates side by side; the smallest median wins."""
    fns = {name: (lambda d=deployed: d(*args, **kwargs)) for name, (deployed, _) in passing.items()}
    with pinned_threads(threads):
        samples, failures = measure_interleaved(fns, budget)
    for name, reason in failures.items():
        table[name].update(status="failed", reason=f"failed while timed: {reason}")
    for name, values in samples.items():
        stats = summarize(values, warn=False)
        table[name].update(median_ms=stats["median"], p90_ms=stats["p90"], cv=stats["cv"])
    if not samples:
        raise LoweringError("target='auto': every parity-passing target failed while timed: "
                            + "; ".join(f"{n}: {r}" for n, r in failures.items()))
    ranked = sorted(samples, key=lambda n: table[n]["median_ms"])
    best = ranked[0]
    if len(ranked) == 1:
        return best, f"the only target that lowered, matched eager and ran ({table[best]['median_ms']:.3f} ms median)"
    runner_up = ranked[1]
    ratio = table[runner_up]["median_ms"] / table[best]["median_ms"]
    return best, (
        f"fastest of {len(ranked)} parity-passing targets: {table[best]['median_ms']:.3f} ms median, "
        f"next {runner_up} {table[runner_up]['median_ms']:.3f} ms ({ratio:.2f}x), timed interleaved"
    )


def _finite(value: float | None) -> float | None:
    return value if value is not None and value == value and abs(value) != float("inf") else None
