"""ResNet-50 on every available target, against eager PyTorch and against each runtime used by hand.

For each runtime, fxdeploy's ``Deployed.execute`` and the same artifact files driven directly
through the runtime's own API (same threads, same precision) are timed side by side, one call
each in turn, so that drift in machine load hits every row alike. "overhead" is fxdeploy's
median (and min) over the direct one, minus one. A second by-hand copy of each runtime is timed
with them as an A/A control: its "overhead" is the noise floor of the run.

    .venv/bin/python benchmarks/runtimes_bench.py [--seconds 3] [--warmup 1] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import fxdeploy  # noqa: E402
from examples.models import resnet50  # noqa: E402
from fxdeploy.bench.timing import timed_after_warm_call  # noqa: E402
from fxdeploy.runtime.ncnn import configure as configure_ncnn  # noqa: E402
from fxdeploy.runtime.openvino import compile_config, read_model  # noqa: E402

Run = Callable[[], Any]


def direct_onnxruntime(art: Path, x: np.ndarray, settings: fxdeploy.Settings) -> Run:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = settings.threads, 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(art / "model.onnx"), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda: session.run(None, {name: x})


def direct_openvino(art: Path, x: np.ndarray, settings: fxdeploy.Settings) -> Run:
    import openvino

    core = openvino.Core()
    compiled = core.compile_model(read_model(core, art / "model.onnx"), "CPU", compile_config(settings))
    request = compiled.create_infer_request()
    return lambda: request.infer({0: x})


def direct_ncnn(art: Path, x: np.ndarray, settings: fxdeploy.Settings) -> Run:
    import ncnn

    net = ncnn.Net()
    configure_ncnn(net.opt, settings)
    net.load_param(str(art / "model.ncnn.param"))
    net.load_model(str(art / "model.ncnn.bin"))
    image = np.ascontiguousarray(x[0])

    def run() -> np.ndarray:
        extractor = net.create_extractor()
        mat = ncnn.Mat(image)
        extractor.input("in0", mat)
        return np.array(extractor.extract("out0")[1])

    return run


def direct_torchscript(art: Path, x: np.ndarray, settings: fxdeploy.Settings) -> Run:
    module = torch.jit.load(str(art / "model.pt"))
    tensor = torch.from_numpy(x)

    def run() -> Any:
        with torch.inference_mode():
            return module(tensor)

    return run


DIRECT = {
    "onnxruntime": direct_onnxruntime, "openvino": direct_openvino, "ncnn": direct_ncnn,
    "torchscript": direct_torchscript,
}


def side_by_side(
    rows: dict[str, Run], warmup: float, seconds: float, min_runs: int = 50
) -> dict[str, list[float]]:
    """Warm each row up, then call the rows in turn, in a fresh random order every round, until
    every row has run ``seconds`` and ``min_runs`` times. Call i of every row ran at nearly the
    same moment, so drift in machine load hits every row alike. Each timed call follows an untimed
    call of the same row (``timed_after_warm_call``)."""
    for run in rows.values():
        end = time.perf_counter() + warmup
        while time.perf_counter() < end:
            run()
    samples: dict[str, list[float]] = {name: [] for name in rows}
    names = list(rows)
    shuffle = random.Random(0)
    while min(sum(s) for s in samples.values()) < seconds * 1e3 or len(samples[names[0]]) < min_runs:
        for name in shuffle.sample(names, len(names)):
            samples[name].append(timed_after_warm_call(rows[name]) / 1e6)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="measured time per row, at least")
    parser.add_argument("--min-runs", type=int, default=50, help="measured calls per row, at least")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--targets", nargs="*", default=None, help="default: every available target")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, (x,) = resnet50()
    statuses = fxdeploy.targets()
    names = args.targets or [n for n, s in statuses.items() if s.available]
    for name, status in statuses.items():
        if name not in names or not status.available:
            print(f"# {name}: skipped ({status.reason or 'not requested'})")
    with torch.inference_mode():
        eager = side_by_side({"eager": lambda: model(x)}, args.warmup, args.seconds, args.min_runs)
    results: list[dict[str, Any]] = [_row("eager", "eager PyTorch", eager["eager"])]
    work = Path(tempfile.mkdtemp(prefix="fxdeploy-bench-"))
    for name in names:
        results.extend(_bench_target(name, model, x, work, args))
    _print(results, args)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


def _bench_target(
    name: str, model: torch.nn.Module, x: torch.Tensor, work: Path, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """fxdeploy, the runtime by hand, and a second by-hand copy: the A/A control shows the noise."""
    settings = fxdeploy.Settings(threads=args.threads)
    start = time.perf_counter()
    deployed = fxdeploy.lower(model, (x,), target=name, settings=settings)
    lowering_s = time.perf_counter() - start
    art = deployed.save(work / name)
    feeds = {deployed.input_names[0]: x}
    rows = {"fxdeploy": lambda: deployed.execute(feeds)}
    if name in DIRECT:
        rows["direct"] = DIRECT[name](art, x.numpy(), settings)
        rows["control"] = DIRECT[name](art, x.numpy(), settings)
    samples = side_by_side(rows, args.warmup, args.seconds, args.min_runs)
    fx = _row(name, f"fxdeploy {name}", samples["fxdeploy"], lowering_s=lowering_s)
    fx["engine_median_ms"] = deployed.stats.median
    if name not in DIRECT:
        return [fx]
    direct = _row(name, f"{name} by hand", samples["direct"])
    control = _row(name, f"{name} by hand, 2nd copy", samples["control"])
    for row in (fx, control):
        row["overhead_pct"] = 100 * (row["median_ms"] / direct["median_ms"] - 1)
        row["overhead_min_pct"] = 100 * (row["min_ms"] / direct["min_ms"] - 1)
    return [fx, direct, control]


def _row(target: str, label: str, samples: list[float], **extra: Any) -> dict[str, Any]:
    return {"target": target, "row": label, "runs": len(samples), "median_ms": float(np.median(samples)),
            "p90_ms": float(np.percentile(samples, 90)), "min_ms": float(np.min(samples)), **extra}


def _print(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(f"ResNet-50 (random weights), batch 1, 224x224, {args.threads} threads; torch {torch.__version__}; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end (1.0 = one busy CPU)")
    print("overhead: vs the same runtime by hand, by median and by min; the '2nd copy' row is an A/A")
    print("control (the runtime by hand against itself), i.e. the noise floor of this run")
    header = ("row", "runs", "median ms", "p90 ms", "min ms", "vs eager", "ovh median", "ovh min")
    print(f"{header[0]:<30}{header[1]:>5}" + "".join(f"{h:>11}" for h in header[2:]))
    eager = results[0]["median_ms"]
    for r in results:
        over = [f"{r[k]:+.1f}%" if k in r else "" for k in ("overhead_pct", "overhead_min_pct")]
        print(f"{r['row']:<30}{r['runs']:>5}{r['median_ms']:>11.2f}{r['p90_ms']:>11.2f}{r['min_ms']:>11.2f}"
              f"{eager / r['median_ms']:>10.2f}x{over[0]:>11}{over[1]:>11}")


if __name__ == "__main__":
    main()
