"""ncnn with host stages while another process uses the CPU, over the same on an idle CPU (one run).

The per-image YOLOv5-style detector (``examples/yolov5_loop.py``) lowered to ncnn runs engine
stages on ncnn and its NMS as host stages (TorchScript) in between. ncnn's OpenMP threads that spin
after a layer then compete with the host's torch ops, and with one other CPU-bound process the
call can take 100x longer. fxdeploy sets ``openmp_blocktime`` 0 on such nets
(``fxdeploy/artifact/ncnn_net.py``); ncnn applies it only where it is built with LLVM's OpenMP.

Each variant runs in its own interpreter, on the same saved artifact, alternating rounds without
and with one competing process (a Python busy loop), so both figures share the machine's drift:
- ``fxdeploy``: the artifact as fxdeploy loads it;
- ``blocktime 20``: ncnn's default spin put back on the same nets;
- ``OMP_WAIT_POLICY=PASSIVE``: the environment variable libgomp (the Linux wheels' OpenMP) reads
  when ncnn is imported, set for that interpreter only.

Run: ``.venv/bin/python benchmarks/ncnn_contention.py [--rounds 5] [--calls 20]``.
"""

from __future__ import annotations

import argparse
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
VARIANTS = {"fxdeploy": {}, "blocktime 20": {"blocktime": 20}, "OMP_WAIT_POLICY=PASSIVE": {"env": "PASSIVE"}}
BUSY = "while True: pass"


def child(artifact: str, blocktime: int | None, rounds: int, calls: int) -> dict[str, list[float]]:
    """Median ms of ``calls`` calls per round, idle and with one competitor, alternating."""
    import torch

    import fxdeploy

    torch.set_num_threads(2)
    deployed = fxdeploy.load(artifact)
    for net in deployed.executor.nets if blocktime is not None else []:
        net.opt.openmp_blocktime = blocktime
    x = torch.rand(1, 3, 128, 128)
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
    parser.add_argument("--child", nargs=2, metavar=("ARTIFACT", "BLOCKTIME"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        blocktime = None if args.child[1] == "-" else int(args.child[1])
        print(json.dumps(child(args.child[0], blocktime, args.rounds, args.calls)))
        return
    import fxdeploy
    from examples.yolov5_loop import yolov5_loop

    model, (x,) = yolov5_loop()
    with tempfile.TemporaryDirectory() as work:
        artifact = fxdeploy.lower(model, (x,), target="ncnn", dynamic_shapes={"images": {0: ("batch", 1, 8)}})
        path = str(artifact.save(Path(work) / "yolo-ncnn"))
        print("| variant | idle ms | with one competing process ms | ratio |\n|---|---:|---:|---:|")
        for name, variant in VARIANTS.items():
            env = dict(os.environ, PYTHONPATH=str(ROOT))
            if "env" in variant:
                env["OMP_WAIT_POLICY"] = str(variant["env"])
            command = [sys.executable, __file__, "--rounds", str(args.rounds), "--calls", str(args.calls),
                       "--child", path, str(variant.get("blocktime", "-"))]
            out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
            figures = json.loads(out.strip().splitlines()[-1])
            idle, busy = statistics.median(figures["idle"]), statistics.median(figures["one competitor"])
            print(f"| {name} | {idle:.2f} | {busy:.2f} | {busy / idle:.1f}x |", flush=True)


if __name__ == "__main__":
    main()
