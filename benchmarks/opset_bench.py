"""ONNX opset 23 against opset 20 on the zoo's transformers, per ONNX target, side by side in one run.

At opset 23 torch.onnx writes each ``scaled_dot_product_attention`` as one ONNX ``Attention``
node; at opset 20 (what ``torch.onnx.export`` writes by default) it spells it out in six to ten
nodes. The ONNX Runtime and OpenVINO targets now default to 23 (``fxdeploy/targets/onnxruntime.py``,
``OPSET``). This run keeps that choice honest: each model is lowered twice per target, differing only
in ``Settings.onnx.opset``; both artifacts are checked against eager, and their ``Deployed`` calls
(batch 1) are timed in interleaved rounds (docs/performance.md: warm-up >= 1 s, then >= 3 s and >= 50 runs,
2 threads). The ratio is taken per round, where both ran in the same machine state.

    .venv/bin/python benchmarks/opset_bench.py [--models vit_small,detr_small] [--rounds 30]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import fxdeploy  # noqa: E402
from examples.zoo import ZOO  # noqa: E402
from fxdeploy.bench.timing import Budget, measure_interleaved, pinned_threads, round_medians  # noqa: E402
from fxdeploy.settings import Settings  # noqa: E402
from fxdeploy.targets.sections import OnnxSettings  # noqa: E402

MODELS = ("vit_small", "detr_small", "rt_detr_small", "yolos_small")
TARGETS = ("onnxruntime", "openvino")
OPSETS = (20, 23)


def attention_nodes(deployed: fxdeploy.Deployed, work: Path) -> int:
    import onnx

    model = onnx.load(str(deployed.save(work) / "model.onnx"), load_external_data=False)
    return sum(node.op_type == "Attention" for node in model.graph.node)


def compare(name: str, target: str, threads: int, rounds: int, work: Path) -> str:
    entry = ZOO[name]
    model, (images,) = entry.factory()
    x = images[:1].contiguous()
    calls, nodes = {}, {}
    for opset in OPSETS:  # lower() checks each artifact against eager before it returns
        settings = Settings(threads=threads, sections={"onnx": OnnxSettings(opset=opset)})
        deployed = fxdeploy.lower(model, (x,), target=target, settings=settings, substitutions=entry.substitutions)
        nodes[opset] = attention_nodes(deployed, work / f"{name}-{target}-{opset}")
        calls[opset] = lambda d=deployed: d(x)
    ends: dict[str, list[int]] = {}
    samples, failures = measure_interleaved(
        {str(k): fn for k, fn in calls.items()}, Budget(rounds=rounds), round_ends=ends
    )
    if failures:
        return f"| {name} | {target} | failed: {failures} | | | |"
    old, new = (round_medians(samples[str(k)], ends[str(k)]) for k in OPSETS)
    ratios = [b / a for a, b in zip(old, new, strict=True)]
    low, middle, high = np.percentile(ratios, [10, 50, 90])
    medians = [float(np.median(samples[str(k)])) for k in OPSETS]
    return (
        f"| {name} | {target} | {nodes[20]} / {nodes[23]} | {medians[0]:.3f} | {medians[1]:.3f} | "
        f"{medians[1] / medians[0]:.3f}x | {middle:.3f}x ({low:.2f}-{high:.2f}) |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    lines = [
        "| model | target | Attention nodes (20 / 23) | opset 20 ms | opset 23 ms | 23 / 20 (medians) "
        "| 23 / 20 per round: median (p10-p90) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    with pinned_threads(args.threads), tempfile.TemporaryDirectory() as work:
        for name in args.models.split(","):
            for target in args.targets.split(","):
                lines.append(compare(name, target, args.threads, args.rounds, Path(work)))
                print(lines[-1], flush=True)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
