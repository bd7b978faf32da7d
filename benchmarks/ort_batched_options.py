"""ONNX Runtime session options for the batched engine: YOLO11n's batched ONNX at batch 8 under
several session settings, against the per-image path (two one-thread sessions side by side, as
``Settings.image_streams`` runs them), interleaved. One contender is the batched graph written
twice, each copy on half the batch, under the parallel executor: whether ONNX Runtime runs the two
halves at once, as the per-image path's two sessions do (it does not: every node ran on one thread).

    YOLO_OFFLINE=1 .venv-det/bin/python benchmarks/gpu_batched_onnx.py prepare gpu-run   # the ONNX files
    .venv/bin/python benchmarks/ort_batched_options.py gpu-run
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

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


def two_halves(path: Path, out: Path) -> Path:
    """``path``'s graph written twice, each copy on one half of the batch, the outputs (each
    per image along dim 0) concatenated: two independent branches for the parallel executor."""
    model = onnx.load(str(path))
    graph = model.graph
    shared = {init.name for init in graph.initializer} | {""}
    source = graph.input[0].name

    def renamed(name: str, half: str) -> str:
        return name if name in shared else f"{half}/{name}"

    def constant(name: str, value: int) -> onnx.NodeProto:
        tensor = helper.make_tensor(name, onnx.TensorProto.INT64, [1], [value])
        return helper.make_node("Constant", [], [name], value=tensor)

    nodes = [
        helper.make_node("Shape", [source], ["halves/n"], start=0, end=1),
        constant("halves/one", 1),
        constant("halves/two", 2),
        helper.make_node("Add", ["halves/n", "halves/one"], ["halves/n_plus_one"]),
        helper.make_node("Div", ["halves/n_plus_one", "halves/two"], ["halves/first"]),
        helper.make_node("Sub", ["halves/n", "halves/first"], ["halves/second"]),
        helper.make_node("Concat", ["halves/first", "halves/second"], ["halves/sizes"], axis=0),
        helper.make_node("Split", [source, "halves/sizes"], [f"A/{source}", f"B/{source}"], axis=0),
    ]
    for half in "AB":
        for node in graph.node:
            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            copy.name = f"{half}/{node.name}"
            copy.input[:] = [renamed(name, half) for name in node.input]
            copy.output[:] = [renamed(name, half) for name in node.output]
            nodes.append(copy)
    nodes += [helper.make_node("Concat", [f"A/{o.name}", f"B/{o.name}"], [o.name], axis=0) for o in graph.output]
    del graph.node[:], graph.value_info[:]
    graph.node.extend(nodes)
    onnx.save(model, str(out))
    return out


def main(folder: Path) -> None:
    x = np.load(folder / "images.npy")
    batched = folder / "batched.onnx"
    sessions = {
        "batched, 2 threads": _session(batched, 2),
        "batched, dynamic_block_base 4": _session(batched, 2, **{"session.dynamic_block_base": "4"}),
        "batched, no spinning": _session(batched, 2, **{"session.intra_op.allow_spinning": "0"}),
        "batched, parallel executor (2 inter, 1 intra)": _session(batched, 1, inter=2, parallel=True),
        "two half-batch copies, parallel executor (2 inter, 1 intra)": _session(
            two_halves(batched, folder / "two_halves.onnx"), 1, inter=2, parallel=True
        ),
    }
    want = sessions["batched, 2 threads"].run(None, {"images": x})
    for name, session in sessions.items():
        got = session.run(None, {"images": x})
        assert all(np.array_equal(w, g) for w, g in zip(want, got, strict=True)), f"{name}: outputs differ"
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
