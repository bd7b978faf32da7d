"""Benchmarks by docs/performance.md's rules: fxdeploy targets against eager, inductor and the peers.

``run_benchmark`` returns one JSON document (``schema.SCHEMA``); ``report`` turns it into a
markdown table and a PNG. Timing lives here and in ``benchmarks/``, never in tests.
"""

from __future__ import annotations

from fxdeploy.bench.report import markdown, plot
from fxdeploy.bench.runner import run_benchmark
from fxdeploy.bench.schema import SCHEMA, SCHEMA_VERSION, validate
from fxdeploy.bench.timing import Budget, measure, measure_interleaved, pinned_threads, summarize
from fxdeploy.parity.batches import rebatch

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "Budget",
    "markdown",
    "measure",
    "measure_interleaved",
    "pinned_threads",
    "plot",
    "rebatch",
    "run_benchmark",
    "summarize",
    "validate",
]
