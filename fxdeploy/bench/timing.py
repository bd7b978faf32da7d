"""Timing by the trtexec/Polygraphy conventions of docs/performance.md: warm up by time, measure by time.

Both phases have two minimums (seconds and runs) and end only once both are met, so a slow model
still gets enough samples and a fast one still runs long enough to average out scheduler noise.
Contenders are measured interleaved in rounds: on a shared machine drift hits all of them alike,
which is what makes the ratios between them meaningful.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

logger = logging.getLogger(__name__)

CV_WARN = 0.05


@dataclass(frozen=True)
class Budget:
    """How long to warm up and to measure, per contender. Minimums are raised to at least 1."""

    warmup_s: float = 1.0
    warmup_runs: int = 10
    min_time_s: float = 3.0
    min_runs: int = 50
    rounds: int = 5
    """measurement is split into this many interleaved rounds (1 = one contender after another)."""

    def __post_init__(self) -> None:
        if self.warmup_s < 0 or self.min_time_s < 0:
            raise ValueError(f"warm-up and measurement times must be >= 0, got {self}")
        if self.warmup_runs < 0 or self.min_runs < 1 or self.rounds < 1:
            raise ValueError(f"need warmup_runs >= 0, min_runs >= 1 and rounds >= 1, got {self}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_until(fn: Callable[[], Any], min_s: float, min_runs: int, samples: list[float] | None = None) -> int:
    """Call ``fn`` until both minimums are met; append each call's latency (ms) to ``samples``."""
    start = time.perf_counter()
    runs = 0
    while runs < min_runs or time.perf_counter() - start < min_s:
        begin = time.perf_counter_ns()
        fn()
        elapsed = time.perf_counter_ns() - begin
        if samples is not None:
            samples.append(elapsed / 1e6)
        runs += 1
    return runs


def timed_after_warm_call(fn: Callable[[], Any]) -> int:
    """Nanoseconds of one call of ``fn``, made right after an untimed one.

    Where contenders alternate call by call, each engine owns its own thread pool, and the first
    call after a switch shares the cores with the previous engine's still-spinning threads.
    """
    fn()
    start = time.perf_counter_ns()
    fn()
    return time.perf_counter_ns() - start


def measure(fn: Callable[[], Any], budget: Budget) -> list[float]:
    """Warm up, then measure one callable; returns the latency samples in milliseconds."""
    return measure_interleaved({"fn": fn}, budget)[0]["fn"]


def measure_interleaved(
    fns: Mapping[str, Callable[[], Any]],
    budget: Budget,
    on_step: Callable[[str], None] | None = None,
    round_ends: dict[str, list[int]] | None = None,
) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Warm up each callable, then measure all of them in ``budget.rounds`` rotating rounds; each
    takes over from another with one untimed call.

    Returns (samples in ms per name, failure reason per name). A callable that raises is
    dropped from later rounds and reported, so one broken contender does not stop the others.
    ``round_ends``, where given, receives per name the sample count at the end of each round it
    ran (``round_medians`` turns that into one median per round).
    """
    samples: dict[str, list[float]] = {name: [] for name in fns}
    failures: dict[str, str] = {}
    for name, fn in fns.items():
        _guarded(name, failures, lambda fn=fn: run_until(fn, budget.warmup_s, budget.warmup_runs))
        if on_step:
            on_step(f"warm-up {name}")
    per_round_s = budget.min_time_s / budget.rounds
    per_round_runs = math.ceil(budget.min_runs / budget.rounds)
    names = list(fns)
    order = random.Random(0)
    previous = names[-1] if names else None  # the last one warmed up
    for index in range(budget.rounds):
        # a fresh order each round: a rotation would keep each contender behind the same neighbour
        for name in order.sample(names, len(names)):
            if name in failures:
                continue
            fn = fns[name]
            if name != previous:
                # untimed: the first call after a switch shares the cores with the previous engine's
                # still-spinning thread pool (OpenMP, ORT) and finds the caches holding its data
                _guarded(name, failures, fn)
            previous = name
            _guarded(name, failures, lambda fn=fn, name=name: run_until(fn, per_round_s, per_round_runs, samples[name]))
            if round_ends is not None and name not in failures:
                round_ends.setdefault(name, []).append(len(samples[name]))
        if on_step:
            on_step(f"round {index + 1}/{budget.rounds}")
    return {n: s for n, s in samples.items() if n not in failures}, failures


def round_medians(samples_ms: list[float], ends: list[int]) -> list[float]:
    """The median latency of each round, from the sample counts at each round's end."""
    starts = [0, *ends[:-1]]
    return [float(np.median(samples_ms[a:b])) for a, b in zip(starts, ends, strict=True) if b > a]


def _guarded(name: str, failures: dict[str, str], call: Callable[[], Any]) -> None:
    if name in failures:
        return
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - one failing contender is a row status, not a crash
        failures[name] = f"{type(exc).__name__}: {exc}"[:500]
        logger.warning("%s failed while timed: %s", name, failures[name])


def summarize(
    samples_ms: list[float] | np.ndarray, batch: int = 1, cv_threshold: float = CV_WARN, *, warn: bool = True
) -> dict[str, Any]:
    """Percentiles (linear interpolation), spread and throughput of latency samples in ms.

    Throughput is items per second over the whole measurement (batch / mean latency), i.e. what
    back-to-back calls deliver; the median is the robust latency figure.
    """
    values = np.asarray(samples_ms, dtype=np.float64)
    if values.size == 0:
        raise ValueError("summarize() needs at least one sample")
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    mean = float(values.mean())
    std = float(values.std(ddof=1)) if values.size > 1 else 0.0
    cv = std / mean if mean > 0 else 0.0
    summary = {
        "count": int(values.size), "median": float(p50), "p90": float(p90), "p99": float(p99),
        "min": float(values.min()), "max": float(values.max()), "mean": mean, "std": std, "cv": cv,
        "throughput": batch * 1000.0 / mean if mean > 0 else math.inf,
        "cv_warning": cv > cv_threshold,
    }
    if summary["cv_warning"] and warn:
        logger.warning(
            "latency varies: CV %.1f%% > %.0f%% over %d runs (median %.3f ms); the machine is noisy",
            100 * cv, 100 * cv_threshold, values.size, p50,
        )
    return summary


@contextlib.contextmanager
def pinned_threads(threads: int) -> Iterator[None]:
    """PyTorch's intra-op threads for eager and inductor rows; targets get Settings(threads=n)."""
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
