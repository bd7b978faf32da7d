"""What the substituted-function watch costs a non-strict trace: ``torch.export.export`` of YOLO11n
(one image, non-strict) bare, and under ``substitution.watch_calls`` of the built-in function
substitutions (torchvision's ``batched_nms``), interleaved rounds. Since the capture watches only
the functions the eager run called (``substitution.traced``), a model calling none is traced bare.

Run: ``YOLO_OFFLINE=1 .venv-det/bin/python benchmarks/capture_watch.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fxdeploy.capture import substitution  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    from examples.ultralytics_yolo import build, images

    torch.set_num_threads(1)
    model, x = build("yolo11n.yaml").eval(), images(1, 0)
    functions = [s for s in substitution.builtin_substitutions() if not s.is_method]
    if not functions:
        raise SystemExit("no function substitution here (torchvision missing): run it in .venv-det")

    def export(watched: bool) -> float:
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if watched:
                with substitution.watch_calls(functions):
                    torch.export.export(model, (x,), strict=False)
            else:
                torch.export.export(model, (x,), strict=False)
        return time.perf_counter() - start

    export(False)  # warm-up: imports, first-trace caches
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(rounds):
        for watched in (False, True):
            times[watched].append(export(watched))
    bare, watched = statistics.median(times[False]), statistics.median(times[True])
    print("| trace of YOLO11n (non-strict, one image) | median s | runs |")
    print("|---|---:|---|")
    print(f"| bare | {bare:.2f} | {', '.join(f'{t:.2f}' for t in times[False])} |")
    print(f"| under the watch | {watched:.2f} | {', '.join(f'{t:.2f}' for t in times[True])} |")
    print(f"watched / bare: {watched / bare:.2f}x")


if __name__ == "__main__":
    main()
