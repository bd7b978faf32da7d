"""Core overhead benchmarks: four ratios, each measured side by side in one run (docs/performance.md).

(a) ``Deployed.__call__`` over a bare ``InferenceSession.run`` on the same ONNX file and the same
    session options, transformers ResNet-50, batch 1, 2 threads. Bar: <= 1.03x.
(b) per-call overhead of ``Deployed`` on a tiny model (one nn.Linear) over a bare session run.
    Bar: <= 100 us.
(c) ``fxdeploy.lower(target="onnxruntime")`` wall time over ``torch.onnx.export(dynamo=True)`` on
    ResNet-50, each in a fresh interpreter (``fxdeploy.bench.isolated``), alternating, so warm
    caches and imports favour neither. Bar: <= 1.5x.
(d) peak RSS of those same ``lower()`` and ``torch.onnx.export`` children during the call (the
    high-water mark is reset right before it, see ``fxdeploy/bench/isolated.py``), and the growth
    over the RSS before the call. Bar: <= 1.5x, judged on the peak.

(a) and (b) are timed two ways on the same two callables: interleaved rounds (ratio of medians),
and strict alternation A B B A ... (median of per-pair ratios / differences), which cancels slow
drift on a shared machine best. The bar is judged on the paired figure.

Run: ``.venv/bin/python benchmarks/core_bench.py [--quick] [--lower-runs N] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import fxdeploy  # noqa: E402
from fxdeploy.bench.isolated import run_isolated  # noqa: E402
from fxdeploy.bench.schema import machine_info  # noqa: E402
from fxdeploy.bench.timing import Budget, measure_interleaved, summarize, timed_after_warm_call  # noqa: E402

THREADS = 2
SPEC = "examples/models.py:resnet50"


def bare_session(deployed: fxdeploy.Deployed, directory: Path) -> Any:
    """The same model.onnx with the same options the ORT executor uses."""
    import onnxruntime as ort

    deployed.save(directory)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = THREADS, 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(str(directory / "model.onnx"), sess_options=options,
                                providers=["CPUExecutionProvider"])


def paired(a: Callable[[], Any], b: Callable[[], Any], pairs: int) -> tuple[float, float]:
    """Median of per-pair ratio a/b and difference a-b (ms), order alternating A B, B A.

    Each timed call follows an untimed call of the same callable (``timed_after_warm_call``):
    timed back to back, the switch penalty would land on whichever runs second and bias the pair.
    """
    ratios, diffs = [], []
    timed = timed_after_warm_call
    for i in range(pairs):
        if i % 2 == 0:
            ta, tb = timed(a), timed(b)
        else:
            tb, ta = timed(b), timed(a)
        ratios.append(ta / tb)
        diffs.append((ta - tb) / 1e6)
    return statistics.median(ratios), statistics.median(diffs)


def call_vs_session(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], budget: Budget, pairs: int,
                    work: Path) -> dict[str, Any]:
    settings = fxdeploy.Settings(threads=THREADS)
    deployed = fxdeploy.lower(model, inputs, target="onnxruntime", settings=settings)
    session = bare_session(deployed, work)
    feeds = dict(zip([i.name for i in session.get_inputs()], [x.numpy() for x in inputs], strict=True))
    names = deployed.output_names
    fns = {"deployed": lambda: deployed(*inputs), "session": lambda: session.run(names, feeds)}
    samples, failures = measure_interleaved(fns, budget)
    assert not failures, failures
    stats = {name: summarize(values, warn=False) for name, values in samples.items()}
    ratio, diff = paired(fns["deployed"], fns["session"], pairs)
    return {
        "deployed_median_ms": stats["deployed"]["median"], "session_median_ms": stats["session"]["median"],
        "deployed_cv": stats["deployed"]["cv"], "session_cv": stats["session"]["cv"],
        "ratio_of_medians": stats["deployed"]["median"] / stats["session"]["median"],
        "paired_ratio": ratio, "paired_overhead_us": diff * 1000,
        "overhead_us_from_medians": (stats["deployed"]["median"] - stats["session"]["median"]) * 1000,
    }


def lower_vs_export(runs: int, work: Path) -> dict[str, Any]:
    """Alternate fresh-interpreter children: lower(), export, export, lower(), ..."""
    from examples.models import resnet50

    _, inputs = resnet50()
    work.mkdir(parents=True, exist_ok=True)
    torch.save(inputs, work / "inputs.pt")
    base = {"spec": SPEC, "inputs": str(work / "inputs.pt"), "threads": THREADS}
    results: dict[str, list[Any]] = {"lower": [], "export": []}
    for i in range(runs):
        order = ["lower", "export"] if i % 2 == 0 else ["export", "lower"]
        for kind in order:
            out = work / f"{kind}-{i}"
            request = dict(base, out=str(out / "artifact"))
            if kind == "lower":
                request.update(action="fxdeploy", target="onnxruntime",
                               settings=fxdeploy.Settings(threads=THREADS).to_dict())
            else:
                request.update(action="onnx_export")
            result = run_isolated(request, out)
            assert result.ok, result.error
            assert result.peak_scope == "call", "this kernel cannot reset the RSS high-water mark"
            results[kind].append(result)
            print(f"  {kind} run {i + 1}: {result.lower_s:.2f} s, peak RSS {result.peak_rss_mb:.0f} MB "
                  f"(before the call {result.base_rss_mb:.0f} MB)", file=sys.stderr)
    summary: dict[str, Any] = {}
    for kind, items in results.items():
        summary[f"{kind}_s"] = [r.lower_s for r in items]
        summary[f"{kind}_peak_rss_mb"] = [r.peak_rss_mb for r in items]
        summary[f"{kind}_rss_growth_mb"] = [r.peak_rss_mb - r.base_rss_mb for r in items]
    med = {k: statistics.median(v) for k, v in summary.items()}
    summary.update(
        time_ratio=med["lower_s"] / med["export_s"],
        peak_rss_ratio=med["lower_peak_rss_mb"] / med["export_peak_rss_mb"],
        rss_growth_ratio=med["lower_rss_growth_mb"] / med["export_rss_growth_mb"],
    )
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short windows (smoke run, not for reporting)")
    parser.add_argument("--lower-runs", type=int, default=3, help="fresh children per side for (c) and (d)")
    parser.add_argument("--skip-lower", action="store_true")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "core_bench.json")
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    big = Budget(0.5, 3, 2.0, 20, 4) if args.quick else Budget(2.0, 10, 20.0, 100, 10)
    small = Budget(0.2, 10, 1.0, 200, 4) if args.quick else Budget(1.0, 100, 10.0, 2000, 10)
    from examples.models import resnet50

    report: dict[str, Any] = {"threads": THREADS, "machine": machine_info(THREADS)}
    with tempfile.TemporaryDirectory(prefix="fxdeploy-core-bench-") as tmp:
        work = Path(tmp)
        print("(a) Deployed.__call__ vs InferenceSession.run, ResNet-50 batch 1", file=sys.stderr)
        model, inputs = resnet50()
        report["a_resnet50"] = call_vs_session(model, inputs, big, 20 if args.quick else 200, work / "a")
        print("(b) per-call overhead, one nn.Linear", file=sys.stderr)
        torch.manual_seed(0)
        tiny = torch.nn.Linear(64, 64).eval()
        report["b_linear"] = call_vs_session(tiny, (torch.randn(1, 64),), small, 2000 if args.quick else 20000,
                                             work / "b")
        if not args.skip_lower:
            print("(c, d) lower() vs torch.onnx.export, fresh interpreters, ResNet-50", file=sys.stderr)
            report["cd_lower_vs_export"] = lower_vs_export(1 if args.quick else args.lower_runs, work / "cd")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2))
    print(render(report))


def render(report: dict[str, Any]) -> str:
    a, b = report["a_resnet50"], report["b_linear"]
    rows = [
        ("(a) Deployed/session, ResNet-50", f"{a['paired_ratio']:.3f}x paired, {a['ratio_of_medians']:.3f}x of medians "
         f"({a['deployed_median_ms']:.2f} vs {a['session_median_ms']:.2f} ms)", "<= 1.03x", a["paired_ratio"] <= 1.03),
        ("(b) Deployed overhead, Linear", f"{b['paired_overhead_us']:.1f} us paired, "
         f"{b['overhead_us_from_medians']:.1f} us of medians ({b['deployed_median_ms'] * 1000:.1f} vs "
         f"{b['session_median_ms'] * 1000:.1f} us)", "<= 100 us", b["paired_overhead_us"] <= 100),
    ]
    cd = report.get("cd_lower_vs_export")
    if cd:
        rows += [
            ("(c) lower()/export time", f"{cd['time_ratio']:.2f}x (median {statistics.median(cd['lower_s']):.1f} vs "
             f"{statistics.median(cd['export_s']):.1f} s)", "<= 1.5x", cd["time_ratio"] <= 1.5),
            ("(d) lower()/export peak RSS", f"{cd['peak_rss_ratio']:.2f}x process peak "
             f"({statistics.median(cd['lower_peak_rss_mb']):.0f} vs "
             f"{statistics.median(cd['export_peak_rss_mb']):.0f} MB); "
             f"growth during the call {cd['rss_growth_ratio']:.2f}x", "<= 1.5x", cd["peak_rss_ratio"] <= 1.5),
        ]
    lines = ["| what | measured | bar | met |", "|---|---|---|---|"]
    lines += [f"| {what} | {value} | {bar} | {'yes' if ok else 'NO'} |" for what, value, bar, ok in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
