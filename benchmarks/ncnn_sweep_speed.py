"""ncnn against ONNX Runtime on the sweep models ncnn newly runs (issue 36, Must show 6): each
model lowered once per target at its sweep dynamic dims (2 threads), then timed interleaved, round
by round, on the example's inputs at batch 1 and 3; medians and the ncnn / ONNX Runtime ratio.
Both are checked against eager first (lower()'s own check, on by default).

    .venv/bin/python benchmarks/ncnn_sweep_speed.py [--models bert,wav2vec2,...] [--rounds 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import fxdeploy  # noqa: E402
from examples.sweep import SWEEP, make_inputs  # noqa: E402

TARGETS = ("onnxruntime", "ncnn")
NEWLY = ("bert", "wav2vec2", "segresnet", "dinov2", "distilbert", "whisper_encoder", "detr", "owlvit", "unet3d",
         "convnext")
"""The sweep models ncnn did not run before issue 36 (each refused, or not in the sweep yet)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(NEWLY))
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(2)
    print(f"torch {torch.__version__}, 2 threads, {args.rounds} interleaved rounds, medians in ms\n")
    print("| model | batch | ONNX Runtime | ncnn | ncnn / ORT | ncnn's host ops |")
    print("|---|---:|---:|---:|---:|---|")
    for name in args.models.split(","):
        entry = SWEEP[name]
        model, example = entry.factory()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            deployed = {t: fxdeploy.lower(model, example, target=t, dynamic_shapes=entry.dynamic_shapes,
                                          settings=fxdeploy.Settings(threads=2)) for t in TARGETS}
        moved = deployed["ncnn"].manifest["info"].get("unconverted_on_host", {}).get("ops", {})
        for batch in (1, 3):
            inputs = make_inputs(name, batch, other_size=False)
            times: dict[str, list[float]] = {t: [] for t in TARGETS}
            for t in TARGETS:  # warm-up
                deployed[t](*inputs)
            for _ in range(args.rounds):
                for t in TARGETS:
                    start = time.perf_counter()
                    deployed[t](*inputs)
                    times[t].append((time.perf_counter() - start) * 1e3)
            ort, ncnn = (statistics.median(times[t]) for t in TARGETS)
            print(f"| {name} | {batch} | {ort:.2f} | {ncnn:.2f} | {ncnn / ort:.2f}x | {', '.join(moved) or '-'} |")


if __name__ == "__main__":
    main()
