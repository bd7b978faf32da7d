"""fxdeploy's ONNX optimizer (``fxdeploy/lowering/onnx_optimize.py``) against torch.onnx's own, on the
same unoptimized export of each model: seconds, nodes after, and whether the two wrote the same bytes.
The two alternate, ``--rounds`` times each; medians.

    .venv/bin/python benchmarks/onnx_optimize.py examples.idioms:ssd examples.idioms:fcos
    .venv-det/bin/python benchmarks/onnx_optimize.py examples.torchvision_detectors:retinanet \\
        examples.torchvision_detectors:fasterrcnn
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnx_ir as ir  # noqa: E402

import fxdeploy  # noqa: E402
from fxdeploy.lowering import onnx_optimize  # noqa: E402
from fxdeploy.settings import preset  # noqa: E402


def unoptimized(spec: str, directory: Path) -> Path:
    """The model's ONNX at a dynamic batch, exported without optimization (``fast-lower``)."""
    module, name = spec.split(":")
    loaded = importlib.import_module(module)
    factories = getattr(loaded, "FACTORIES", {})
    model, example = factories[name]() if name in factories else getattr(loaded, name)()
    deployed = fxdeploy.lower(model, example, target="onnxruntime", dynamic_shapes={"images": {0: ("batch", 1, 8)}},
                              settings=preset("fast-lower"))
    deployed.save(directory / name)
    return directory / name / "model.onnx"


def optimized(path: Path, which: str) -> tuple[float, bytes, int]:
    model = ir.load(str(path))
    start = time.perf_counter()
    if which == "torch.onnx":
        from torch.onnx._internal._lazy_import import onnxscript_apis

        onnxscript_apis.optimize(model)
    else:
        onnx_optimize.optimize(types.SimpleNamespace(model=model))
    seconds = time.perf_counter() - start
    return seconds, ir.serde.serialize_model(model).SerializeToString(), sum(1 for _ in model.graph.all_nodes())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("models", nargs="+", help="module:factory, e.g. examples.idioms:ssd")
    parser.add_argument("--rounds", type=int, default=2)
    options = parser.parse_args()
    print("| model | nodes exported | nodes after | torch.onnx's optimizer s | fxdeploy's s | ratio | same bytes |")
    print("|---|---:|---:|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for spec in options.models:
            path = unoptimized(spec, Path(tmp))
            exported = sum(1 for _ in ir.load(str(path)).graph.all_nodes())
            times: dict[str, list[float]] = {"torch.onnx": [], "fxdeploy": []}
            written: dict[str, set[bytes]] = {"torch.onnx": set(), "fxdeploy": set()}
            for _ in range(options.rounds):
                for which in ("torch.onnx", "fxdeploy"):
                    seconds, data, nodes = optimized(path, which)
                    times[which].append(seconds)
                    written[which].add(data)
            theirs, ours = statistics.median(times["torch.onnx"]), statistics.median(times["fxdeploy"])
            print(f"| {spec} | {exported} | {nodes} | {theirs:.1f} | {ours:.1f} | {ours / theirs:.2f} | "
                  f"{written['torch.onnx'] == written['fxdeploy']} |", flush=True)


if __name__ == "__main__":
    main()
