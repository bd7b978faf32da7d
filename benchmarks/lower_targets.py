"""lower() of one model for every available target in one process, with capture's memo
(``fxdeploy/capture/memo.py``: one torch.export per model and example) and without it (cleared
before each lowering), the two orders alternating so that warm-up favours neither.

    .venv/bin/python benchmarks/lower_targets.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fxdeploy  # noqa: E402
from examples import detector  # noqa: E402
from fxdeploy.capture import memo  # noqa: E402

SHAPES = {"images": {0: ("batch", 1, 8)}}


def every_target(model, x, targets: list[str], reuse: bool) -> float:  # noqa: ANN001
    memo.clear()
    start = time.perf_counter()
    for target in targets:
        if not reuse:
            memo.clear()
        fxdeploy.lower(model, (x,), target=target, dynamic_shapes=SHAPES)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    rounds = parser.parse_args().rounds
    targets = [name for name, status in fxdeploy.targets().items() if status.available and name != "tensorrt"]
    model, (x,) = detector.tiny_yolo()
    every_target(model, x, targets[:1], True)  # imports and first-call costs, for neither side
    seconds: dict[bool, list[float]] = {True: [], False: []}
    for r in range(rounds):
        for reuse in (True, False) if r % 2 == 0 else (False, True):
            seconds[reuse].append(every_target(model, x, targets, reuse))
    once, each = statistics.median(seconds[True]), statistics.median(seconds[False])
    print(f"TinyYolo, dynamic batch, targets {', '.join(targets)}, {rounds} rounds")
    print(f"traced once: {once:.1f} s; traced per target: {each:.1f} s; ratio {once / each:.2f}x")


if __name__ == "__main__":
    main()
