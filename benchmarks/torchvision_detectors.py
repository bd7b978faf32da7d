"""torchvision's detectors: each fxdeploy target against eager torchvision, side by side in one run.

Needs the detector environment (`make det-venv`):

    .venv-det/bin/python benchmarks/torchvision_detectors.py [--models retinanet fcos ssd300 fasterrcnn]
        [--batches 1] [--targets onnxruntime openvino torchscript ncnn]

Each model is ``examples/torchvision_detectors.py``'s (``weights=None``, calibrated random weights,
called as ``model(list_of_images)``, no substitution), lowered once per target with a dynamic
batch of 1..8. Contenders are timed end to end (images in, torchvision's list of dicts out),
interleaved, on 2 threads; every contender's detections are matched with eager's (label and
IoU >= 0.99, scores within 1e-3).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import fxdeploy  # noqa: E402
from examples.torchvision_detectors import NAMES, build, images  # noqa: E402
from fxdeploy.bench.timing import Budget, measure_interleaved, pinned_threads, summarize  # noqa: E402
from fxdeploy.parity.outputs import Tolerances, compare_outputs  # noqa: E402

THREADS = 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(NAMES))
    parser.add_argument("--batches", type=int, nargs="+", default=[1])
    parser.add_argument("--targets", nargs="+", default=["onnxruntime", "openvino", "torchscript", "ncnn"])
    args = parser.parse_args()
    settings = fxdeploy.Settings(threads=THREADS, verify=False)  # parity is checked below, by IoU
    results = []
    with pinned_threads(THREADS), torch.no_grad():
        for name in args.models:
            model = build(name)
            deployed = {t: fxdeploy.lower(model, (images(2, 0),), target=t, settings=settings,
                                          dynamic_shapes={"images": {0: ("batch", 1, 8)}}) for t in args.targets}
            for batch in args.batches:
                x = images(batch, 7)
                want = model(x)
                contenders = {"eager": lambda x=x, model=model: model(x)}
                contenders.update({f"fxdeploy:{t}": (lambda d=d, x=x: d(x)) for t, d in deployed.items()})
                samples, failures = measure_interleaved(contenders, Budget(min_time_s=2.0, min_runs=10))
                for contender, fn in contenders.items():
                    row: dict[str, Any] = {"model": name, "batch": batch, "name": contender}
                    if contender in failures:
                        results.append({**row, "error": failures[contender]})
                        continue
                    (match,) = compare_outputs(want, fn(), Tolerances(score_atol=1e-3))
                    results.append({**row, **summarize(samples[contender], batch, warn=False),
                                    "parity": match.detail, "matches": match.ok})
    print_table(results)
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "torchvision_detectors.json").write_text(json.dumps(results, indent=1, default=str))


def print_table(results: list[dict[str, Any]]) -> None:
    print("| model | batch | contender | median ms | p90 ms | vs eager | matches eager | detections |")
    print("|---|---|---|---|---|---|---|---|")
    eager = {(r["model"], r["batch"]): r["median"] for r in results if r["name"] == "eager" and "median" in r}
    for r in results:
        if "error" in r:
            print(f"| {r['model']} | {r['batch']} | {r['name']} | failed: {r['error'][:80]} | | | | |")
            continue
        ratio = r["median"] / eager[r["model"], r["batch"]]
        print(f"| {r['model']} | {r['batch']} | {r['name']} | {r['median']:.1f} | {r['p90']:.1f} | {ratio:.2f}x | "
              f"{'yes' if r['matches'] else 'NO'} | {r['parity']} |")


if __name__ == "__main__":
    main()
