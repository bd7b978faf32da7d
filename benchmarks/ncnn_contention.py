"""ncnn with host stages while another process uses the CPU, over the same on an idle CPU (one run).

The per-image YOLOv5-style detector (``examples/yolov5_loop.py``) lowered to ncnn runs engine
stages on ncnn and its NMS as host stages (TorchScript) in between. ncnn's OpenMP threads that spin
after a layer then compete with the host's torch ops, and with one other CPU-bound process the
call can take 100x longer. A plain convolutional net on ncnn (no host stage) shows what a shorter
spin costs where nothing else runs. libgomp (the Linux wheel's OpenMP, its own copy) reads its spin
policy once, when ncnn is imported, for every net of the process; ``openmp_blocktime`` (set to 0 on
nets with host stages, ``fxdeploy/artifact/ncnn_net.py``) applies only to LLVM OpenMP builds.

Each variant runs in its own interpreter, on the same saved artifacts, alternating rounds without
and with one competing process (a Python busy loop), so both figures share the machine's drift:
- ``fxdeploy``: the artifacts as fxdeploy loads them (libgomp's default spin);
- ``GOMP_SPINCOUNT=10000``: a short spin, set for that interpreter;
- ``OMP_WAIT_POLICY=PASSIVE``: threads that never spin.

Run: ``.venv/bin/python benchmarks/ncnn_contention.py [--rounds 5] [--calls 20]``.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
VARIANTS = {
    "fxdeploy (libgomp's default spin)": {},
    "GOMP_SPINCOUNT=10000": {"GOMP_SPINCOUNT": "10000"},
    "OMP_WAIT_POLICY=PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
}
BUSY = "while True: pass"


def child(artifact: str, size: int, rounds: int, calls: int) -> dict[str, list[float]]:
    """Median ms of ``calls`` calls per round, idle and with one competitor, alternating."""
    import torch

    import fxdeploy

    torch.set_num_threads(2)
    deployed = fxdeploy.load(artifact)
    x = torch.rand(1, 3, size, size)
    for _ in range(5):
        deployed(x)
    figures: dict[str, list[float]] = {"idle": [], "one competitor": []}
    for _ in range(rounds):
        for mode in figures:
            competitor = subprocess.Popen([sys.executable, "-c", BUSY]) if mode != "idle" else None
            time.sleep(0.5 if competitor else 0.0)
            samples = []
            for _ in range(calls):
                start = time.perf_counter()
                deployed(x)
                samples.append((time.perf_counter() - start) * 1e3)
            if competitor is not None:
                competitor.kill()
                competitor.wait()
            figures[mode].append(statistics.median(samples))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--child", nargs=2, metavar=("ARTIFACT", "SIZE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args.rounds, args.calls)))
        return
    import fxdeploy
    from examples.models import convnet
    from examples.yolov5_loop import yolov5_loop

    models = {"YOLOv5-style loop (host stages)": yolov5_loop(), "ConvNet (engine only)": convnet()}
    with tempfile.TemporaryDirectory() as work:
        print("| model | variant | idle ms | with one competing process ms | ratio |\n|---|---|---:|---:|---:|")
        for label, (model, inputs) in models.items():
            arg = next(iter(inspect.signature(model.forward).parameters))
            artifact = fxdeploy.lower(model, inputs, target="ncnn", dynamic_shapes={arg: {0: ("batch", 1, 8)}})
            path, size = str(artifact.save(Path(work) / label.split()[0])), str(inputs[0].shape[-1])
            for name, env in VARIANTS.items():
                clean = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
                command = [sys.executable, __file__, "--rounds", str(args.rounds), "--calls", str(args.calls),
                           "--child", path, size]
                out = subprocess.run(command, env={**clean, **env, "PYTHONPATH": str(ROOT)}, capture_output=True,
                                     text=True, check=True).stdout
                figures = json.loads(out.strip().splitlines()[-1])
                idle, busy = statistics.median(figures["idle"]), statistics.median(figures["one competitor"])
                print(f"| {label} | {name} | {idle:.2f} | {busy:.2f} | {busy / idle:.1f}x |", flush=True)


if __name__ == "__main__":
    main()
