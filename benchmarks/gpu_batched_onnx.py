"""The batched engine on a GPU machine: a detector's ONNX artifacts (one call per batch, and one
per image) on ONNX Runtime's best provider there, against eager detections.

Two steps. YOLO11n is prepared here, because the GPU machine has no Ultralytics and no package
registry; torchvision's RetinaNet is prepared there (its 139 MB of weights need not travel):

    YOLO_OFFLINE=1 .venv-det/bin/python benchmarks/gpu_batched_onnx.py prepare gpu-run   # here
    python3 benchmarks/gpu_batched_onnx.py run gpu-run                                    # there
    python3 benchmarks/gpu_batched_onnx.py prepare gpu-retina retinanet                  # there
    python3 benchmarks/gpu_batched_onnx.py run gpu-retina

``prepare`` lowers the model (YOLO11n unless named) with the default settings (lower()'s check on) batched and per-image
(``Settings(batching="per_image")``), copies each artifact's ``model.onnx``, writes the TensorRT
target's ONNX (its ONNX step: the engine step needs TensorRT), and saves batch-8 images and
eager's detections. ``run`` needs onnxruntime and numpy only: it matches each engine's detections
to eager's (label and IoU >= 0.99, scores within 1e-3; the TensorRT ONNX at batch 8 and image by
image at batch 1), then times batch 8 as one call of the batched ONNX against eight calls of the
per-image ONNX, interleaved, and prints one table (``PROVIDERS`` names them, CUDA's and the CPU's
by default). ``TF32=0`` turns CUDA's TF32 off (eager's
convolutions are float32; TF32 moves scores by about 1e-3, past the matching tolerance).

The GPU machine's onnxruntime has no CUDA provider: onnxruntime-gpu (CUDA 13) is carried there
unpacked under a ``PYTHONPATH`` folder, its CUDA kernels cut to the H100's sm_90 to fit the
transfer (``benchmarks/README.md``, "On the lent GPU machine"), and ``onnxruntime.preload_dlls()``
loads the CUDA libraries of that machine's torch before ``run``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

BATCH = 8
RUNS = int(os.environ.get("RUNS", "30"))


def _model(name: str) -> tuple[Any, Callable[..., Any]]:
    """The detector and its image maker: YOLO11n with Ultralytics' NMS, or torchvision's RetinaNet."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    if name == "yolo11n":
        from examples.ultralytics_yolo import YoloWithNMS, build, images

        return YoloWithNMS(build("yolo11n.yaml")), images
    from examples import torchvision_detectors

    return torchvision_detectors.build(name), torchvision_detectors.images


def _eager_rows(row: Any) -> np.ndarray:
    """One image's eager detections as (x1, y1, x2, y2, score, label) rows."""
    if isinstance(row, dict):
        return np.concatenate([row["boxes"].numpy(), row["scores"].numpy()[:, None],
                               row["labels"].numpy()[:, None].astype(np.float32)], 1)
    return row.numpy()


def prepare(out: Path, name: str = "yolo11n") -> None:
    import torch

    model, images = _model(name)  # puts the checkout on sys.path
    import fxdeploy

    out.mkdir(parents=True, exist_ok=True)
    x = images(BATCH, 2)
    with torch.no_grad():
        rows = model(x)
    np.save(out / "images.npy", x.numpy())
    np.savez(out / "eager.npz", *[_eager_rows(r) for r in rows])
    for label, batching in (("batched", "vectorize"), ("per_image", "per_image")):
        deployed = fxdeploy.lower(model, (images(2, 0),), target="onnxruntime",
                                  dynamic_shapes={"images": {0: ("batch", 1, 8)}},
                                  settings=fxdeploy.Settings(batching=batching))
        deployed.save(out / f"{label}.dir")
        (out / f"{label}.json").write_text(json.dumps({"outputs": deployed.manifest["outputs"]}))
        _one_file(out / f"{label}.dir", out / f"{label}.onnx")
    _tensorrt_onnx(model, images(2, 0), out)
    print("prepared", sorted(p.name for p in out.iterdir()))


def _tensorrt_onnx(model, x, out: Path) -> None:
    """The TensorRT target's ONNX (opset 20, ONNX NonMaxSuppression), exactly what its engine is
    built from, at a dynamic batch: written by the target's ONNX step, as the tests do
    (``tests.helpers.tensorrt_onnx_file``), since the engine step needs TensorRT."""
    from tests.helpers import tensorrt_onnx_file

    folder = out / "tensorrt.dir"
    folder.mkdir()
    tensorrt_onnx_file(model, (x,), {"images": {0: ("batch", 1, 8)}}, folder)
    _one_file(folder, out / "tensorrt.onnx")


def _one_file(folder: Path, onnx_file: Path) -> None:
    """``folder/model.onnx`` as one file, its weights inline (RetinaNet's are external data), and
    the folder removed."""
    import shutil

    import onnx

    onnx.save(onnx.load(str(folder / "model.onnx")), str(onnx_file))
    shutil.rmtree(folder)


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


def _rows(session: Any, feed: np.ndarray, count: int) -> list[np.ndarray]:
    """Each image's rows from one engine call: its padded rows and per-image counts (a batched
    engine's ``[batch, rows, ...]`` and ``[batch]``; a per-image engine's ``[rows, ...]`` and a
    scalar). Ultralytics' rows come as one ``[rows, 6]`` output, torchvision's as boxes, scores
    and labels."""
    names = [o.name for o in session.get_outputs()]
    out = dict(zip(names, session.run(None, {"images": feed}), strict=True))
    if "0" in out:
        data = out["0"]
    else:
        data = np.concatenate([out["0.boxes"], out["0.scores"][..., None],
                               out["0.labels"][..., None].astype(np.float32)], -1)
    counts = out["row_count_0"]
    if counts.ndim == 0:
        return [data[: int(counts)]]
    return [data[i, : int(counts[i])] for i in range(count)]


def _engines(folder: Path, provider: str, x: np.ndarray) -> dict[str, Callable[[], list[np.ndarray]]]:
    """Each engine as a call that returns every image's rows: one call of the batched ONNX, or
    one call of the per-image ONNX for each image."""
    import onnxruntime as ort

    providers = _providers(provider)
    batched = ort.InferenceSession(str(folder / "batched.onnx"), providers=providers)
    single = ort.InferenceSession(str(folder / "per_image.onnx"), providers=providers)

    def one_call() -> list[np.ndarray]:
        return _rows(batched, x, len(x))

    def per_image() -> list[np.ndarray]:
        return [_rows(single, x[i:i + 1], 1)[0] for i in range(len(x))]

    engines = {"batched": one_call, "per_image": per_image}
    if (folder / "tensorrt.onnx").is_file():
        tensorrt = ort.InferenceSession(str(folder / "tensorrt.onnx"), providers=providers)
        engines["tensorrt_onnx"] = lambda: _rows(tensorrt, x, len(x))
    return engines


def _providers(provider: str) -> list:
    """The provider, with CUDA's TF32 off where ``TF32=0`` (eager's float32 convolutions are exact
    float32; TF32 moves scores by about 1e-3, past this script's matching tolerance)."""
    if provider == "CUDAExecutionProvider" and os.environ.get("TF32") == "0":
        return [(provider, {"use_tf32": "0"})]
    return [provider]


def run(folder: Path) -> None:
    import onnxruntime as ort

    x = np.load(folder / "images.npy")
    eager = np.load(folder / "eager.npz")
    want = [eager[f"arr_{i}"] for i in range(BATCH)]
    wanted = os.environ.get("PROVIDERS", "CUDAExecutionProvider,CPUExecutionProvider").split(",")
    providers = [p for p in wanted if p in ort.get_available_providers()]
    print("onnxruntime", ort.__version__, "providers available:", ort.get_available_providers())
    for provider in providers:
        engines = _engines(folder, provider, x)
        for label, engine in engines.items():
            got = engine()
            bad = sum(_unmatched(w, g) for w, g in zip(want, got, strict=True))
            print(f"{provider} {label}: {sum(len(g) for g in got)} detections, {bad} unmatched against eager")
        if "tensorrt_onnx" in engines:
            _check_batch_one(folder, provider, x, want)
        times: dict[str, list[float]] = {label: [] for label in engines}
        for _ in range(RUNS):
            for label, engine in engines.items():
                start = time.perf_counter()
                engine()
                times[label].append((time.perf_counter() - start) * 1e3)
        b, p = float(np.median(times["batched"])), float(np.median(times["per_image"]))
        print(f"| {provider} | batch {BATCH} | batched {b:.2f} ms | per-image {p:.2f} ms | {b / p:.2f}x |")
        if "tensorrt_onnx" in times:
            t = float(np.median(times["tensorrt_onnx"]))
            print(f"| {provider} | batch {BATCH} | TensorRT's ONNX, one call {t:.2f} ms | {t / p:.2f}x per-image |")


def _check_batch_one(folder: Path, provider: str, x: np.ndarray, want: list[np.ndarray]) -> None:
    """The TensorRT target's ONNX at batch 1, image by image, against eager's rows for that image."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(folder / "tensorrt.onnx"), providers=_providers(provider))
    bad = sum(_unmatched(want[i], _rows(session, x[i:i + 1], 1)[0]) for i in range(len(x)))
    print(f"{provider} tensorrt_onnx at batch 1: {bad} unmatched against eager over {len(x)} images")


if __name__ == "__main__":
    {"prepare": prepare, "run": run}[sys.argv[1]](Path(sys.argv[2]), *sys.argv[3:])
