"""``make demo``: lower the bundled ConvNet to ONNX Runtime, then show parity and speed vs eager."""

from __future__ import annotations

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
    torch.set_num_threads(2)
    model, (x,) = convnet()
    print(f"fxdeploy {fxdeploy.__version__}: lowering ConvNet to onnxruntime (dynamic batch)")
    start = time.perf_counter()
    deployed = fxdeploy.lower(model, (x,), target="onnxruntime", dynamic_shapes={"x": {0: ("batch", 1, 32)}})
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
    print(f"  median latency, batch {x.shape[0]}: eager {eager:.3f} ms, fxdeploy/onnxruntime {engine:.3f} ms "
          f"({engine / eager:.2f}x eager)")
    stats = deployed.stats
    print(f"  execute stats: count={stats.count} median={stats.median:.3f} ms p90={stats.p90:.3f} ms")


if __name__ == "__main__":
    main()
