"""Row builders for eager PyTorch, inductor and fxdeploy targets (peers live in ``peers.py``).

Each builder returns a Row holding a zero-argument callable that runs the contender once on the
shared inputs, plus what it cost to get there. A builder never raises for a contender that
cannot run here: the reason goes into the row, so one broken runtime does not hide the others.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import torch

from fxdeploy.bench.context import BenchContext, Row, RssSampler, directory_bytes
from fxdeploy.errors import first_line
from fxdeploy.targets import TargetStatus


def in_inference_mode(fn: Callable[..., Any], args: tuple[Any, ...]) -> Callable[[], Any]:
    def call() -> Any:
        with torch.inference_mode():
            return fn(*args)

    return call


def eager_row(ctx: BenchContext) -> Row:
    return Row("eager", "eager", version=torch.__version__, fn=in_inference_mode(ctx.model, ctx.inputs))


def inductor_row(ctx: BenchContext) -> Row:
    """``torch.compile`` with its default backend; the first call (the compile) is ``lower_s``."""
    row = Row("inductor", "inductor", version=torch.__version__, lower_measurement="in-process")
    try:
        compiled = torch.compile(ctx.model)
        fn = in_inference_mode(compiled, ctx.inputs)
        start = time.perf_counter()
        fn()
        row.lower_s = time.perf_counter() - start
    except Exception as exc:  # noqa: BLE001 - e.g. no C++ compiler here: a reason, not a crash
        return row.failed(f"torch.compile (inductor) failed: {first_line(exc)}")
    row.fn = fn
    return row


def fxdeploy_row(ctx: BenchContext, status: TargetStatus) -> Row:
    """Lower in a fresh subprocess when the model can be re-created there (see ``isolated.py``),
    then load the saved artifact and time ``Deployed.__call__``, the call users make."""
    import fxdeploy

    row = Row(f"fxdeploy:{status.name}", "fxdeploy", version=status.version)
    if not status.available:
        return row.failed(status.reason or "unavailable", "unavailable")
    out = ctx.work / f"artifact-{status.name}"
    result = ctx.isolated(
        {"action": "fxdeploy", "target": status.name, "settings": ctx.settings.to_dict(), "out": str(out)},
        status.name,
    )
    try:
        if result is None:
            deployed = _lower_in_process(ctx, status.name, row)
            deployed.save(out)
        elif not result.ok:
            return row.failed(f"lowering failed: {result.error}")
        else:
            row.lower_s, row.lower_peak_rss_mb = result.lower_s, result.peak_rss_mb
            row.lower_base_rss_mb, row.lower_measurement = result.base_rss_mb, "subprocess"
        manifest = json.loads((out / "manifest.json").read_text())
        deployed = fxdeploy.load(out, unpack=ctx.unpack_for(manifest["info"].get("substitutions", [])))
    except Exception as exc:  # noqa: BLE001
        return row.failed(f"lowering failed: {first_line(exc)}")
    row.artifact_bytes = directory_bytes(out)
    row.fn = lambda: deployed(*ctx.inputs)
    return row


def _lower_in_process(ctx: BenchContext, target: str, row: Row) -> Any:
    import fxdeploy

    with RssSampler() as rss:
        start = time.perf_counter()
        deployed = fxdeploy.lower(ctx.model, ctx.inputs, target=target, settings=ctx.settings,
                                  substitutions=ctx.substitutions)
        row.lower_s = time.perf_counter() - start
    row.lower_peak_rss_mb, row.lower_base_rss_mb = rss.peak_mb, rss.base_mb
    row.lower_measurement = "in-process"
    return deployed


