"""ONNX Runtime session options for the batched engine: YOLO11n's batched ONNX at batch 8 under
several session settings, against the per-image path (two one-thread sessions side by side, as
``Settings.image_streams`` runs them), interleaved.

    YOLO_OFFLINE=1 .venv-det/bin/python benchmarks/gpu_batched_onnx.py prepare gpu-run   # the ONNX files
    .venv/bin/python benchmarks/ort_batched_options.py gpu-run
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fxdeploy.bench.timing import Budget, measure_interleaved  # noqa: E402

ROUNDS = 12


def _session(path: Path, intra: int, inter: int = 1, parallel: bool = False, **config: str) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = intra, inter
    if parallel:
        options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    options.log_severity_level = 3
    for key, value in config.items():
        options.add_session_config_entry(key, value)
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def main(folder: Path) -> None:
    x = np.load(folder / "images.npy")
    batched = folder / "batched.onnx"
    sessions = {
        "batched, 2 threads": _session(batched, 2),
        "batched, dynamic_block_base 4": _session(batched, 2, **{"session.dynamic_block_base": "4"}),
        "batched, no spinning": _session(batched, 2, **{"session.intra_op.allow_spinning": "0"}),
        "batched, parallel executor (2 inter, 1 intra)": _session(batched, 1, inter=2, parallel=True),
    }
    runs = {name: (lambda s=s: s.run(None, {"images": x})) for name, s in sessions.items()}
    singles = [_session(folder / "per_image.onnx", 1) for _ in range(2)]
    pool = ThreadPoolExecutor(2)

    def per_image() -> None:
        def stream(k: int) -> None:
            for i in range(k, len(x), 2):
                singles[k].run(None, {"images": x[i:i + 1]})

        for future in [pool.submit(stream, k) for k in range(2)]:
            future.result()

    runs["per-image, two one-thread sessions"] = per_image
    budget = Budget(warmup_s=0.0, warmup_runs=2, min_time_s=0.0, min_runs=ROUNDS, rounds=ROUNDS)
    times, failures = measure_interleaved(runs, budget)
    assert not failures, failures
    base = float(np.median(times["per-image, two one-thread sessions"]))
    print(f"| session (batch {len(x)}) | median ms | / per-image |\n|---|---:|---:|")
    for name, values in times.items():
        print(f"| {name} | {np.median(values):.2f} | {np.median(values) / base:.2f}x |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
