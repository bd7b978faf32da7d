"""One engine call per batch against one call per image, for detectors that loop over their images.

Needs the detector environment (`make det-venv`):

    YOLO_OFFLINE=1 .venv-det/bin/python benchmarks/batched_engine.py [--batch 8] [--models ...] [--targets ...]
        [--runs 20]

For each model and CPU target, at ``--batch`` images and 2 threads, interleaved in one run:
- ``batched``: ``fxdeploy.lower`` as it is by default: the per-image graph vectorized, one engine
  call per batch (``fxdeploy/capture/vectorize.py``);
- ``per-image``: the same with ``Settings(batching="per_image")``: one engine call per image, ONNX
  Runtime and OpenVINO running two images at once (``Settings.image_streams``, its default);
- for YOLO11n, ``ultralytics:onnx-nms``: Ultralytics' own batched ONNX export with NMS
  (``model.export(format="onnx", nms=True, batch=...)``) on an ONNX Runtime session.
Artifacts are lowered with ``verify=False`` to keep the run short; instead every contender's
detections are matched here with eager's (label and IoU >= 0.99, scores within 1e-3).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("YOLO_OFFLINE", "1")

import fxdeploy  # noqa: E402
from fxdeploy.bench.timing import Budget, measure_interleaved, pinned_threads, summarize  # noqa: E402
from fxdeploy.parity.boxes import Detections  # noqa: E402
from fxdeploy.parity.detections import compare_detections  # noqa: E402

THREADS = 2
TARGETS = ("onnxruntime", "openvino", "torchscript")


def _yolo() -> tuple[torch.nn.Module, Callable[[int, int], torch.Tensor], Callable[[Any], list[Detections]]]:
    from examples.ultralytics_yolo import YoloWithNMS, build, images

    def dets(rows: Any) -> list[Detections]:
        return [Detections(r[:, :4].float(), r[:, 4].float(), r[:, 5].long()) for r in rows]

    return YoloWithNMS(build("yolo11n.yaml")), images, dets


def _retinanet() -> tuple[torch.nn.Module, Callable[[int, int], torch.Tensor], Callable[[Any], list[Detections]]]:
    from examples.torchvision_detectors import images, retinanet

    def dets(results: Any) -> list[Detections]:
        return [Detections(r["boxes"], r["scores"], r["labels"]) for r in results]

    return retinanet()[0], images, dets


def _rt_detr() -> tuple[torch.nn.Module, Callable[[int, int], torch.Tensor], Callable[[Any], list[Detections]]]:
    """The zoo's RT-DETR (transformers), its batch, height and width dynamic at once."""
    from examples.zoo import ZOO

    def images(count: int, seed: int) -> torch.Tensor:
        return torch.randn(count, 3, 128, 128, generator=torch.Generator().manual_seed(seed))

    def dets(out: Any) -> list[Detections]:
        """transformers' dicts (eager), or the padded rows and counts the tensor-only postprocess gives."""
        if isinstance(out, list):
            return [Detections(r["boxes"], r["scores"], r["labels"]) for r in out]
        boxes, scores, labels, counts = out
        rows = zip(boxes, scores, labels, counts.tolist(), strict=True)
        return [Detections(b[:n], s[:n], lab[:n]) for b, s, lab, n in rows]

    return ZOO["rt_detr_small"].factory()[0], images, dets


MODELS = {"yolo11n": _yolo, "retinanet": _retinanet, "rt_detr": _rt_detr}
def _lowering(name: str) -> tuple[dict[str, Any], Any]:
    """(dynamic_shapes, substitutions) for ``fxdeploy.lower``: RT-DETR's H and W are dynamic too."""
    if name != "rt_detr":
        return {"images": {0: ("batch", 1, 8)}}, None
    from examples.zoo import ZOO

    return ZOO["rt_detr_small"].dynamic_shapes, ZOO["rt_detr_small"].substitutions


def ultralytics_onnx_nms(model: torch.nn.Module, batch: int, work: Path) -> Callable[[torch.Tensor], Any]:
    """Ultralytics' batched ONNX export with its NMS, as rows per image (padding dropped)."""
    import onnxruntime as ort
    from ultralytics import YOLO

    yolo = YOLO("yolo11n.yaml")
    yolo.model = copy.deepcopy(model.model)  # the exporter fuses batch norms into the model it is given
    home = Path.cwd()
    work.mkdir(parents=True, exist_ok=True)
    os.chdir(work)  # Ultralytics writes its export into the cwd
    try:
        path = yolo.export(format="onnx", nms=True, imgsz=320, batch=batch)
    finally:
        os.chdir(home)
    path = work / path  # Ultralytics returns it relative to the cwd it wrote in (absolute stays as is)
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    session = ort.InferenceSession(str(path), options)
    name = session.get_inputs()[0].name

    def run(x: torch.Tensor) -> list[torch.Tensor]:
        out = torch.from_numpy(session.run(None, {name: x.numpy()})[0])
        return [rows[rows[:, 4] > 0] for rows in out]  # padded rows carry score 0

    return run


def contenders(
    name: str, batch: int, work: Path, targets: list[str],
) -> tuple[dict[str, Callable[[torch.Tensor], Any]], Any]:
    model, images, dets = MODELS[name]()
    dynamic, subs = _lowering(name)
    runs: dict[str, Callable[[torch.Tensor], Any]] = {}
    for target in targets:
        for label, batching in (("batched", "vectorize"), ("per-image", "per_image")):
            settings = fxdeploy.Settings(threads=THREADS, batching=batching, verify=False)
            deployed = fxdeploy.lower(model, (images(2, 0),), target=target, settings=settings, dynamic_shapes=dynamic,
                                      substitutions=subs)
            assert deployed.manifest["per_image"]["engine"] == ("batch" if batching == "vectorize" else "image")
            runs[f"{target} {label}"] = deployed
    if name == "yolo11n" and "onnxruntime" in targets:
        runs["ultralytics:onnx-nms"] = ultralytics_onnx_nms(model, batch, work)
    return runs, (model, images, dets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--targets", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    parser.add_argument("--runs", type=int, default=20, help="timed calls per contender, over 5 interleaved rounds")
    args = parser.parse_args()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as work, pinned_threads(THREADS), torch.no_grad():
        for name in args.models:
            runs, (model, images, dets) = contenders(name, args.batch, Path(work) / name, args.targets)
            x = images(args.batch, 7)
            want = dets(model(x))
            budget = Budget(warmup_s=0.0, warmup_runs=2, min_time_s=0.0, min_runs=args.runs, rounds=5)
            samples, failures = measure_interleaved({k: (lambda fn=fn, x=x: fn(x)) for k, fn in runs.items()}, budget)
            for label, fn in runs.items():
                if label in failures:
                    results.append({"model": name, "name": label, "error": failures[label]})
                    continue
                match = compare_detections(label, want, dets(fn(x)), score_atol=1e-3)
                results.append({"model": name, "name": label, **summarize(samples[label], args.batch, warn=False),
                                "parity": match.detail, "matches": match.ok})
    print_table(results, args.batch)
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "batched_engine.json").write_text(json.dumps(results, indent=1, default=str))


def print_table(results: list[dict[str, Any]], batch: int) -> None:
    print(f"| model | contender (batch {batch}, {THREADS} threads) | median ms | batched / per-image | matches eager |")
    print("|---|---|---:|---:|---|")
    medians = {(r["model"], r["name"]): r["median"] for r in results if "median" in r}
    for r in results:
        if "error" in r:
            print(f"| {r['model']} | {r['name']} | failed: {r['error'][:80]} | | |")
            continue
        ratio = ""
        if r["name"].endswith(" batched"):
            per_image = medians.get((r["model"], r["name"].replace(" batched", " per-image")))
            ratio = f"{r['median'] / per_image:.2f}x" if per_image else ""
        print(f"| {r['model']} | {r['name']} | {r['median']:.2f} | {ratio} | "
              f"{'yes' if r['matches'] else 'NO: ' + r['parity']} |")


if __name__ == "__main__":
    main()
