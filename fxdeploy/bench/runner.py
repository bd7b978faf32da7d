"""``run_benchmark``: every contender on the same inputs and threads, timed side by side."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import math
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fxdeploy.bench import ncnn_peer, rows
from fxdeploy.bench import peers as peer_rows
from fxdeploy.bench.context import BenchContext, Row, timed_call
from fxdeploy.bench.progress import Progress
from fxdeploy.bench.schema import SCHEMA_VERSION, machine_info
from fxdeploy.bench.timing import Budget, measure_interleaved, pinned_threads, round_medians, summarize
from fxdeploy.capture import eval_mode
from fxdeploy.parity.batches import rebatch
from fxdeploy.parity.outputs import Tolerances, compare_outputs, max_abs_error, reference_outputs
from fxdeploy.settings import Settings

logger = logging.getLogger(__name__)
Builder = Callable[[BenchContext, Any], Row]
"""(context, eager reference outputs) -> Row; the reference lets peers shape their raw outputs."""
LATENCY_KEYS = ("median", "p90", "p99", "min", "max", "mean", "std", "cv", "count")


def run_benchmark(
    model: torch.nn.Module,
    inputs: tuple[Any, ...] | torch.Tensor,
    *,
    targets: str | Sequence[str] = "all",
    peers: bool = True,
    inductor: bool = True,
    batch: int | None = None,
    threads: int = 2,
    warmup_s: float = 1.0,
    warmup_runs: int = 10,
    min_time_s: float = 3.0,
    min_runs: int = 50,
    rounds: int = 5,
    model_name: str | None = None,
    model_spec: str | None = None,
    settings: Settings | None = None,
    substitutions: dict[Any, Any] | None = None,
    tolerances: Tolerances | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Build every row, check each against eager, time them interleaved; return the JSON document.

    ``model_spec`` (``file.py:factory``) lets fxdeploy lowerings run in fresh subprocesses
    without pickling the model; without it the model is pickled, and if that fails lowering is
    measured in-process (each row says which in ``lower_measurement``).
    """
    import fxdeploy

    budget = Budget(warmup_s, warmup_runs, min_time_s, min_runs, rounds)
    args = rebatch(inputs if isinstance(inputs, tuple) else (inputs,), batch)
    statuses = fxdeploy.targets()
    names = list(statuses) if targets == "all" else list(targets)
    unknown = [n for n in names if n not in statuses]
    if unknown:
        raise ValueError(f"unknown target(s) {unknown}; registered: {sorted(statuses)}")
    settings = dataclasses.replace(settings or Settings(), threads=threads)
    builders = _builders(inductor, peers, names, statuses)
    bar = Progress(len(builders) * 2 + rounds, enabled=progress)
    with pinned_threads(threads), eval_mode(model), tempfile.TemporaryDirectory(prefix="fxdeploy-bench-") as work:
        ctx = BenchContext(model, args, threads, settings, Path(work), model_spec, substitutions)
        reference = reference_outputs(model, args)
        tol = tolerances or Tolerances()
        built = [_build(name, kind, builder, ctx, reference, tol, bar) for name, kind, builder in builders]
        timed = {row.name: timed_call(row) for row, _ in built if row.fn is not None}
        bar.total = bar.done + len(timed) + rounds  # rows that failed to build are not warmed up
        ends: dict[str, list[int]] = {}
        samples, failures = measure_interleaved(timed, budget, on_step=bar.step, round_ends=ends)
        bar.close()
        batch_size = batch or _leading_dim(args)
        documents = [
            _row_json(row, parity, samples.get(row.name), failures.get(row.name), batch_size, ends.get(row.name))
            for row, parity in built
        ]
    return _document(model_name or type(model).__name__, batch_size, args, threads, budget, documents)


def _builders(
    inductor: bool, peers: bool, names: list[str], statuses: dict[str, Any],
) -> list[tuple[str, str, Builder]]:
    """The rows to build, in order: eager, inductor, the peers, then one per fxdeploy target in
    ``names`` (``statuses``: every registered target's status)."""
    builders: list[tuple[str, str, Builder]] = [("eager", "eager", lambda c, r: rows.eager_row(c))]
    if inductor:
        builders.append(("inductor", "inductor", lambda c, r: rows.inductor_row(c)))
    if peers:
        builders += [("peer:onnx-export+ort", "peer", peer_rows.ort_peer_row),
                     ("peer:openvino-compile", "peer", lambda c, r: peer_rows.openvino_peer_row(c)),
                     ("peer:pnnx+ncnn", "peer", ncnn_peer.ncnn_peer_row)]
    builders += [(f"fxdeploy:{n}", "fxdeploy", lambda c, r, n=n: rows.fxdeploy_row(c, statuses[n])) for n in names]
    return builders


def _document(
    model: str, batch: int, args: tuple[Any, ...], threads: int, budget: Budget, documents: list[dict[str, Any]],
) -> dict[str, Any]:
    """The benchmark's JSON document: the run's model, inputs, machine and budget, and its rows."""
    return {
        "schema_version": SCHEMA_VERSION,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "model": model,
        "batch": batch,
        "input_shapes": [list(x.shape) for x in pytree.tree_leaves(args) if isinstance(x, torch.Tensor)],
        "machine": machine_info(threads),
        "budget": budget.as_dict(),
        "rows": documents,
    }


def _build(
    name: str, kind: str, builder: Builder, ctx: BenchContext, reference: Any, tol: Tolerances, bar: Progress,
) -> tuple[Row, dict[str, Any]]:
    bar.step(f"building {name}")
    try:
        row = builder(ctx, reference)
    except Exception as exc:  # noqa: BLE001 - a builder bug is one failed row, not a lost run
        row = Row(name, kind).failed(f"building the row failed: {rows.first_line(exc)}")
    parity: dict[str, Any] = {"ok": None, "detail": None, "max_abs_error": None}
    if row.fn is None:
        return row, parity
    try:
        got = timed_call(row)()  # the parity check sees exactly what is timed
        results = compare_outputs(reference, got, tol)
    except Exception as exc:  # noqa: BLE001
        row.failed(f"running once for the parity check failed: {rows.first_line(exc)}")
        return row, parity
    error = max_abs_error(results)
    bad = [f"{r.name}: {r.detail}" for r in results if not r.ok]
    finite = error if math.isfinite(error) else None
    parity.update(ok=not bad, detail="; ".join(bad)[:1000] or None, max_abs_error=finite)
    if bad:
        logger.warning("%s differs from eager: %s", row.name, parity["detail"])
    return row, parity


def _row_json(row: Row, parity: dict[str, Any], samples: list[float] | None, failure: str | None,
              batch: int, ends: list[int] | None = None) -> dict[str, Any]:
    status, reason = row.status, row.reason
    if failure:
        status, reason = "failed", f"failed while timed: {failure}"
    summary = summarize(samples, batch) if samples and status == "ok" else None
    rounds = round_medians(samples, ends) if summary and samples and ends else None
    return {
        "name": row.name, "kind": row.kind, "status": status, "reason": reason, "version": row.version,
        "latency_ms": {k: summary[k] for k in LATENCY_KEYS} if summary else None,
        "throughput": summary["throughput"] if summary else None,
        "lower_s": row.lower_s, "lower_peak_rss_mb": row.lower_peak_rss_mb,
        "lower_base_rss_mb": row.lower_base_rss_mb, "lower_measurement": row.lower_measurement,
        "artifact_bytes": row.artifact_bytes, "max_abs_error": parity["max_abs_error"],
        "parity_ok": parity["ok"], "parity_detail": parity["detail"],
        "cv_warning": bool(summary and summary["cv_warning"]),
        "round_medians_ms": rounds,
    }


def _leading_dim(args: tuple[Any, ...]) -> int:
    for x in pytree.tree_leaves(args):
        if isinstance(x, torch.Tensor) and x.dim() > 0:
            return int(x.shape[0])
    return 1
