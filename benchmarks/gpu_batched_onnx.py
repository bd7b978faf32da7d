"""The batched engine on a GPU machine: YOLO11n's ONNX artifacts (one call per batch, and one per
image) on ONNX Runtime's best provider there, against eager detections computed here.

Two steps, because the GPU machine has no Ultralytics and no package registry:

    YOLO_OFFLINE=1 .venv-det/bin/python benchmarks/gpu_batched_onnx.py prepare gpu-run   # here
    python3 benchmarks/gpu_batched_onnx.py run gpu-run                                    # there

``prepare`` lowers YOLO11n with the default settings (lower()'s check on) batched and per-image
(``Settings(batching="per_image")``), copies each artifact's ``model.onnx``, and saves batch-8
images and eager's detections. ``run`` needs onnxruntime and numpy only: it matches each engine's
detections to eager's (label and IoU >= 0.99, scores within 1e-3), then times batch 8 as one call
of the batched ONNX against eight calls of the per-image ONNX, interleaved, and prints one table.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

BATCH = 8
RUNS = int(os.environ.get("RUNS", "30"))


def prepare(out: Path) -> None:
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import fxdeploy
    from examples.ultralytics_yolo import YoloWithNMS, build, images

    out.mkdir(parents=True, exist_ok=True)
    model = YoloWithNMS(build("yolo11n.yaml"))
    x = images(BATCH, 2)
    with torch.no_grad():
        rows = model(x)
    np.save(out / "images.npy", x.numpy())
    np.savez(out / "eager.npz", *[r.numpy() for r in rows])
    for label, batching in (("batched", "vectorize"), ("per_image", "per_image")):
        deployed = fxdeploy.lower(model, (images(2, 0),), target="onnxruntime",
                                  dynamic_shapes={"images": {0: ("batch", 1, 8)}},
                                  settings=fxdeploy.Settings(batching=batching))
        deployed.save(out / label)
        (out / f"{label}.json").write_text(json.dumps({"outputs": deployed.manifest["outputs"]}))
        for extra in (out / label).iterdir():
            if extra.name != "model.onnx":
                extra.unlink()
        (out / label).rename(out / f"{label}.dir")
        (out / f"{label}.dir" / "model.onnx").rename(out / f"{label}.onnx")
        (out / f"{label}.dir").rmdir()
    print("prepared", sorted(p.name for p in out.iterdir()))


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    lt, rb = np.maximum(a[:, None, :2], b[None, :, :2]), np.minimum(a[:, None, 2:4], b[None, :, 2:4])
    inter = np.clip(rb - lt, 0, None).prod(-1)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    return inter / (area_a[:, None] + area_b[None, :] - inter)


def _unmatched(want: np.ndarray, got: np.ndarray) -> int:
    """Eager rows (x1, y1, x2, y2, score, label) with no engine row of its label at IoU >= 0.99 and
    score within 1e-3, plus engine rows left over."""
    if len(want) == 0 or len(got) == 0:
        return len(want) + len(got)
    iou = _iou(want, got)
    ok = (iou >= 0.99) & (want[:, None, 5] == got[None, :, 5]) & (np.abs(want[:, None, 4] - got[None, :, 4]) <= 1e-3)
    used, missing = set(), 0
    for i in range(len(want)):
        j = next((j for j in np.flatnonzero(ok[i]) if j not in used), None)
        missing += j is None
        used.add(j)
    return missing + len(got) - len(used - {None})


def _rows(outputs: list[np.ndarray], i: int) -> np.ndarray:
    """Image ``i``'s rows from an engine's padded rows and per-image counts (a batched engine's
    ``[batch, rows, 6]`` and ``[batch]``; a per-image engine's ``[rows, 6]`` and a scalar)."""
    data, count = outputs
    return data[: int(count)] if count.ndim == 0 else data[i, : int(count[i])]


def _engines(folder: Path, provider: str, x: np.ndarray) -> dict[str, Callable[[], list[np.ndarray]]]:
    """Each engine as a call that returns every image's rows: one call of the batched ONNX, or
    one call of the per-image ONNX for each image."""
    import onnxruntime as ort

    batched = ort.InferenceSession(str(folder / "batched.onnx"), providers=[provider])
    single = ort.InferenceSession(str(folder / "per_image.onnx"), providers=[provider])
    assert [o.name for o in batched.get_outputs()] == ["0", "row_count_0"]
    assert [o.name for o in single.get_outputs()] == ["0", "row_count_0"]

    def one_call() -> list[np.ndarray]:
        out = batched.run(None, {"images": x})
        return [_rows(out, i) for i in range(len(x))]

    def per_image() -> list[np.ndarray]:
        return [_rows(single.run(None, {"images": x[i:i + 1]}), 0) for i in range(len(x))]

    return {"batched": one_call, "per_image": per_image}


def run(folder: Path) -> None:
    import onnxruntime as ort

    x = np.load(folder / "images.npy")
    eager = np.load(folder / "eager.npz")
    want = [eager[f"arr_{i}"] for i in range(BATCH)]
    providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in ort.get_available_providers()]
    print("onnxruntime", ort.__version__, "providers available:", ort.get_available_providers())
    for provider in providers:
        engines = _engines(folder, provider, x)
        for label, engine in engines.items():
            got = engine()
            bad = sum(_unmatched(w, g) for w, g in zip(want, got, strict=True))
            print(f"{provider} {label}: {sum(len(g) for g in got)} detections, {bad} unmatched against eager")
        times: dict[str, list[float]] = {label: [] for label in engines}
        for _ in range(RUNS):
            for label, engine in engines.items():
                start = time.perf_counter()
                engine()
                times[label].append((time.perf_counter() - start) * 1e3)
        b, p = float(np.median(times["batched"])), float(np.median(times["per_image"]))
        print(f"| {provider} | batch {BATCH} | batched {b:.2f} ms | per-image {p:.2f} ms | {b / p:.2f}x |")


if __name__ == "__main__":
    {"prepare": prepare, "run": run}[sys.argv[1]](Path(sys.argv[2]))
