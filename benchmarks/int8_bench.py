"""INT8 against fp32, on ONNX Runtime and OpenVINO, at batch 1 and 8, side by side in one run.

Each artifact is lowered once with a dynamic batch (1..8) through the default path (lower()'s
check on; INT8 at its INT8 tolerance) and timed at batch 1 and 8 in interleaved rounds (2 threads,
docs/performance.md). Calibration: 16 batches of 4 synthetic images, the same for every target.
The CPU's VNNI/AVX-512/AMX flags are printed with the table: INT8's speed-up needs VNNI.

YOLO11n is built from its yaml with random weights (no weights can be downloaded here): its
class and box layers are scaled to give many distinct detections, which also amplifies INT8's
rounding, so its INT8 detections are not eager's and lower()'s check would refuse them. Its INT8
rows are lowered with ``verify=False`` and timed only; the table says how many of fp32 eager's
detections they pair (label, IoU >= 0.9). INT8 accuracy is measured on trained models in
tests/e2e/test_int8.py and tests/e2e/test_int8_detector.py.

    .venv/bin/python benchmarks/int8_bench.py --model resnet50
    YOLO_OFFLINE=1 .venv-det/bin/python benchmarks/int8_bench.py --model yolo11n [--size 640]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import fxdeploy  # noqa: E402
from fxdeploy.bench.timing import Budget, measure_interleaved, pinned_threads, summarize  # noqa: E402

TARGETS = ("onnxruntime", "openvino")
BATCHES = (1, 8)
FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8")


def cpu_flags() -> list[str]:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return [flag for flag in FLAGS if flag in flags]


def model_and_images(name: str, size: int = 320) -> tuple[torch.nn.Module, Callable[[int, int], torch.Tensor], str]:
    """The model, a maker of ``count`` images from a seed, and its input's name (YOLO11n's images
    are ``size`` pixels square)."""
    if name == "resnet50":
        from examples.zoo import resnet50

        model, _ = resnet50()

        def pictures(count: int, seed: int) -> torch.Tensor:
            return torch.rand(count, 3, 224, 224, generator=torch.Generator().manual_seed(seed))

        return model, pictures, "pixel_values"
    from examples.ultralytics_yolo import YoloWithNMS, build, images

    def yolo_images(count: int, seed: int) -> torch.Tensor:
        return images(count, seed, size)

    return YoloWithNMS(build("yolo11n.yaml", size)), yolo_images, "images"


def lowered(model: torch.nn.Module, make: Callable[[int, int], torch.Tensor], name: str) -> dict[str, Any]:
    calibration = [(make(4, 100 + i),) for i in range(16)]
    checked = name == "pixel_values"  # ResNet-50's weights are random too, but its logits stay within the check
    out = {}
    for target in TARGETS:
        for precision in ("fp32", "int8"):
            settings = fxdeploy.Settings(precision=precision, verify=checked or precision == "fp32")
            out[f"{target} {precision}"] = fxdeploy.lower(
                model, (make(2, 0),), target=target, dynamic_shapes={name: {0: ("batch", 1, 8)}}, settings=settings,
                calibration=calibration if precision == "int8" else None,
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", choices=("resnet50", "yolo11n"), default="resnet50")
    parser.add_argument("--size", type=int, default=320, help="YOLO11n's image size (its native 640, or 320)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    model, make, name = model_and_images(args.model, args.size)
    with pinned_threads(args.threads):
        artifacts = lowered(model, make, name)
        inputs = {batch: make(batch, 7) for batch in BATCHES}
        rows = {f"{label} b{batch}": (lambda d=deployed, x=inputs[batch]: d(x))
                for batch in BATCHES for label, deployed in artifacts.items()}
        samples, failures = measure_interleaved(rows, Budget(rounds=args.rounds))
    medians = {row: summarize(s, warn=False)["median"] for row, s in samples.items()}
    paired = _paired(model, artifacts, inputs[max(BATCHES)]) if args.model == "yolo11n" else {}
    size = f" at {args.size} px" if args.model == "yolo11n" else ""
    print(f"{args.model}{size}, {args.threads} threads; CPU flags: {', '.join(cpu_flags()) or 'none of ' + str(FLAGS)}")
    print("| target | batch | fp32 ms | int8 ms | int8 / fp32 |")
    print("|---|---:|---:|---:|---:|")
    for target in TARGETS:
        for batch in BATCHES:
            fp32, int8 = f"{target} fp32 b{batch}", f"{target} int8 b{batch}"
            if fp32 in failures or int8 in failures:
                print(f"| {target} | {batch} | failed: {failures.get(fp32) or failures.get(int8)} | | |")
                continue
            print(f"| {target} | {batch} | {medians[fp32]:.2f} | {medians[int8]:.2f} | "
                  f"{medians[int8] / medians[fp32]:.2f}x |")
    for label, text in paired.items():
        print(f"{label}, batch {max(BATCHES)}: {text}")
    return 0


def _paired(model: torch.nn.Module, artifacts: dict[str, Any], x: torch.Tensor) -> dict[str, str]:
    """How many of fp32 eager's detections each artifact pairs (label, IoU >= 0.9, any score)."""
    from fxdeploy.parity.boxes import Detections
    from fxdeploy.parity.match import Rules, Tolerance, match_image

    def detections(rows: list[torch.Tensor]) -> list[Detections]:
        return [Detections(r[:, :4].float(), r[:, 4].float(), r[:, 5].long()) for r in rows]

    with torch.no_grad():
        want = detections(model(x))
    rules = Rules(0.9, Tolerance(1.0), Tolerance(1.0))
    out = {}
    for label, deployed in artifacts.items():
        got = detections(deployed(x))
        matched = [match_image(i, w, g, rules) for i, (w, g) in enumerate(zip(want, got, strict=True))]
        out[label] = (f"{sum(m.matched for m in matched)} of eager's {sum(len(w) for w in want)} detections paired "
                      f"(label, IoU >= 0.9)")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
