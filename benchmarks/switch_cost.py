"""What the first call after a switch between engines costs, against the calls that follow it.

    YOLO_OFFLINE=1 .venv-det/bin/python benchmarks/switch_cost.py [--rounds 20] [--target onnxruntime]

YOLO11n (``examples/ultralytics_yolo.py``, 320 px, batch 8, 2 threads) lowered twice by default
(two artifacts of the same graph, each with its own engine and thread pool) and once with
``Settings(batching="per_image")``. Each round calls the three in a fresh random order, three calls
each back to back; the table gives each one's median over its first calls (right after another
engine ran) and over the calls after those. ``measure_interleaved`` leaves the first call after a
switch untimed because of this difference (``docs/performance.md``).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import fxdeploy  # noqa: E402
from fxdeploy.bench.timing import pinned_threads  # noqa: E402

THREADS = 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--target", default="onnxruntime", choices=("onnxruntime", "openvino", "torchscript"))
    args = parser.parse_args()
    from examples.ultralytics_yolo import YoloWithNMS, build, images

    model = YoloWithNMS(build("yolo11n.yaml"))
    dynamic = {"images": {0: ("batch", 1, 8)}}
    engines = {}
    with pinned_threads(THREADS), torch.no_grad():
        for name, batching in (("batched A", "vectorize"), ("batched B", "vectorize"), ("per-image", "per_image")):
            settings = fxdeploy.Settings(threads=THREADS, batching=batching)
            engines[name] = fxdeploy.lower(model, (images(2, 0),), target=args.target, settings=settings,
                                           dynamic_shapes=dynamic)
        x = images(8, 7)
        for engine in engines.values():
            engine(x), engine(x)
        first: dict[str, list[float]] = {name: [] for name in engines}
        later: dict[str, list[float]] = {name: [] for name in engines}
        order = random.Random(0)
        for _ in range(args.rounds):
            for name in order.sample(list(engines), len(engines)):
                for call in range(3):
                    start = time.perf_counter()
                    engines[name](x)
                    (first if call == 0 else later)[name].append((time.perf_counter() - start) * 1000)
    print(f"YOLO11n on {args.target}, batch 8, {THREADS} threads, {args.rounds} rounds")
    print("| engine | first call after a switch, median ms | later calls, median ms | first / later |")
    print("|---|---:|---:|---:|")
    for name in engines:
        a, b = statistics.median(first[name]), statistics.median(later[name])
        print(f"| {name} | {a:.2f} | {b:.2f} | {a / b:.2f}x |")


if __name__ == "__main__":
    main()
