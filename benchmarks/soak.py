"""Soak: many execute calls on one Deployed; resident memory must not grow after warm-up.

A leak per call (a tensor kept by the timing ring, an exception traceback holding inputs, a
runtime buffer never freed) is invisible in a test of ten calls and fatal in a service. This
runs ``--calls`` valid execute calls on the convnet per target, interleaved with rejected ones
(every ``--bad-every``-th call has the wrong dtype, so the error path is soaked too), samples
RSS, and fails when RSS after the run exceeds RSS after warm-up by ``--limit`` or more.

    .venv/bin/python benchmarks/soak.py [--target onnxruntime ...] [--calls 10000] [--warmup 1000]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import fxdeploy  # noqa: E402
from examples.models import convnet  # noqa: E402

MIB = 2**20


@dataclass(frozen=True)
class Soak:
    target: str
    calls: int
    rejected: int
    counted: int
    rss_warm: int
    rss_end: int
    rss_peak: int
    median_ms: float
    p99_ms: float
    seconds: float

    @property
    def growth(self) -> float:
        return self.rss_end / self.rss_warm - 1


def rss() -> int:
    gc.collect()
    return psutil.Process().memory_info().rss


def soak(target: str, calls: int, warmup: int, bad_every: int) -> Soak:
    model, (x,) = convnet()
    deployed = fxdeploy.lower(model, (x,), target=target, dynamic_shapes={"x": {0: ("batch", 1, 4)}})
    inputs = [{"x": torch.randn(1 + k % 4, 3, 64, 64)} for k in range(16)]
    bad = {"x": inputs[0]["x"].double()}
    for k in range(warmup):
        deployed.execute(inputs[k % len(inputs)])
    deployed.executor.timings.reset()
    warm, peak, rejected = rss(), 0, 0
    start = time.perf_counter()
    for k in range(calls):
        deployed.execute(inputs[k % len(inputs)])
        if bad_every and k % bad_every == 0:
            try:
                deployed.execute(bad)
            except fxdeploy.InputError:
                rejected += 1
        if k % 1000 == 999:
            peak = max(peak, rss())
    seconds = time.perf_counter() - start
    stats = deployed.stats
    return Soak(target, calls, rejected, stats.count, warm, rss(), peak, stats.median, stats.p99, seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", action="append", help="default: every available target")
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=1_000)
    parser.add_argument("--bad-every", type=int, default=10, help="0: no rejected calls")
    parser.add_argument("--limit", type=float, default=0.05, help="allowed RSS growth after warm-up")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    targets = args.target or [name for name, status in fxdeploy.targets().items() if status.available]
    print(f"{'target':<12} {'calls':>6} {'rejected':>8} {'counted':>7} {'RSS warm':>9} {'RSS end':>9} "
          f"{'RSS peak':>9} {'growth':>7} {'median':>8} {'p99':>8} {'wall':>6}")
    failed = []
    for target in targets:
        r = soak(target, args.calls, args.warmup, args.bad_every)
        print(f"{r.target:<12} {r.calls:>6} {r.rejected:>8} {r.counted:>7} {r.rss_warm / MIB:>7.1f}Mi "
              f"{r.rss_end / MIB:>7.1f}Mi {r.rss_peak / MIB:>7.1f}Mi {r.growth:>+7.2%} {r.median_ms:>6.2f}ms "
              f"{r.p99_ms:>6.2f}ms {r.seconds:>5.1f}s", flush=True)
        if r.growth >= args.limit or r.counted != r.calls:
            failed.append(target)
    if failed:
        print(f"FAILED: {', '.join(failed)} (growth >= {args.limit:.0%} or stats.count != calls)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
