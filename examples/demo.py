"""``make demo``: lower the bundled ConvNet to ONNX Runtime, then show parity and speed vs eager.

Eager and fxdeploy are timed at the same thread count, printed with the figures: one intra-op
thread by default (``torch.set_num_threads(1)`` for eager, ``Settings(threads=1)`` for ONNX
Runtime). On a CPU other processes share, eager's OpenMP threads spin against them at two threads
(measured here, 2 cores under load: eager 148 ms at 2 threads, 1.8 ms at 1; ONNX Runtime 1.2 ms and
1.0 ms), which would make the ratio a measure of the machine's load. ``python examples/demo.py
--threads N`` times both at N.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fxdeploy  # noqa: E402
from examples.models import convnet  # noqa: E402


def _median_ms(fn, runs: int = 50) -> float:
    for _ in range(5):
        fn()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads for eager and fxdeploy alike")
    threads = parser.parse_args().threads
    torch.set_num_threads(threads)
    model, (x,) = convnet()
    print(f"fxdeploy {fxdeploy.__version__}: lowering ConvNet to onnxruntime (dynamic batch)")
    start = time.perf_counter()
    deployed = fxdeploy.lower(model, (x,), target="onnxruntime", dynamic_shapes={"x": {0: ("batch", 1, 32)}},
                              settings=fxdeploy.Settings(threads=threads))
    print(f"  lowered in {time.perf_counter() - start:.2f} s: {deployed!r}")
    for batch in (1, 8):
        xb = torch.randn(batch, *x.shape[1:])
        with torch.no_grad():
            error = (deployed(xb) - model(xb)).abs().max().item()
        print(f"  batch {batch}: max abs error vs eager PyTorch = {error:.2e}")
        assert error <= 1e-4, f"parity failed at batch {batch}: {error}"
    with torch.no_grad():
        eager = _median_ms(lambda: model(x))
    engine = _median_ms(lambda: deployed(x))
    print(f"  threads: {threads} for both (torch.set_num_threads({threads}) for eager, "
          f"Settings(threads={threads}) for ONNX Runtime's intra-op pool)")
    print(f"  median latency, batch {x.shape[0]}: eager {eager:.3f} ms, fxdeploy/onnxruntime {engine:.3f} ms "
          f"({eager / engine:.2f}x as fast as eager)")
    stats = deployed.stats
    print(f"  execute stats: count={stats.count} median={stats.median:.3f} ms p90={stats.p90:.3f} ms")


if __name__ == "__main__":
    main()
