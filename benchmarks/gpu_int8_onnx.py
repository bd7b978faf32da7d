"""The TensorRT target's INT8 ONNX (symmetric Q/DQ, what a strongly typed engine is built from) on a
GPU runtime: ONNX Runtime's CUDA provider against its CPU provider and fp32, on a CNN trained on
scikit-learn's digits (``tests/e2e/test_int8.py``'s). TensorRT itself is on neither machine.

    .venv/bin/python benchmarks/gpu_int8_onnx.py prepare DIR      # here: train, quantize, write
    python3 benchmarks/gpu_int8_onnx.py run DIR                   # there, with a CUDA provider

``prepare`` writes the TensorRT target's ONNX at fp32 and at INT8 (calibrated on 256 training
images) and the 397 held-out images with their labels and eager's top-1. ``run`` gives each file's
top-1 on each provider (the CPU's at basic optimizations, as TensorRT computes Q/DQ: see the test),
and the largest logit difference of the INT8 file between the two providers.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np


def prepare(out: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import torch
    from sklearn.datasets import load_digits

    import fxdeploy
    from tests.e2e.test_int8 import BATCH, _calibration, _trained
    from tests.helpers import tensorrt_onnx_file

    data = load_digits()  # as tests/e2e/test_int8.py splits it
    images = torch.tensor(data.images, dtype=torch.float32)[:, None] / 16.0
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(0))
    digits = {"train_x": images[order[:1400]], "train_y": torch.tensor(data.target)[order[:1400]],
              "test_x": images[order[1400:]], "test_y": torch.tensor(data.target)[order[1400:]]}
    model = _trained(digits)
    out.mkdir(parents=True, exist_ok=True)
    example = (digits["test_x"][:4],)
    for label, settings, calibration in (
        ("fp32", None, None),
        ("int8", fxdeploy.Settings(precision="int8"), fxdeploy.Calibration(_calibration(digits))),
    ):
        folder = out / f"{label}.dir"
        folder.mkdir()
        tensorrt_onnx_file(model, example, BATCH, folder, settings, calibration)
        (folder / "model.onnx").rename(out / f"{label}.onnx")  # one file: no external weights at this size
        shutil.rmtree(folder)
    with torch.no_grad():
        eager = model(digits["test_x"]).argmax(1).numpy()
    np.savez(out / "digits.npz", x=digits["test_x"].numpy(), y=digits["test_y"].numpy(), eager=eager)
    top1 = 100 * float((eager == digits["test_y"].numpy()).mean())
    print("prepared", sorted(p.name for p in out.iterdir()), f"eager top-1 {top1:.2f}%")


def run(folder: Path) -> None:
    import onnxruntime as ort

    data = np.load(folder / "digits.npz")
    print("onnxruntime", ort.__version__, "providers available:", ort.get_available_providers())
    print(f"eager fp32 top-1: {100 * float((data['eager'] == data['y']).mean()):.2f}%")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    logits = {}
    for file in ("fp32.onnx", "int8.onnx"):
        for provider in ("CPUExecutionProvider", "CUDAExecutionProvider"):
            if provider not in ort.get_available_providers():
                continue
            chosen = [(provider, {"use_tf32": "0"})] if provider.startswith("CUDA") else [provider]
            session = ort.InferenceSession(str(folder / file), options, providers=chosen)
            (out,) = session.run(None, {session.get_inputs()[0].name: data["x"]})
            logits[file, provider] = out
            top1 = 100 * float((out.argmax(1) == data["y"]).mean())
            agree = 100 * float((out.argmax(1) == data["eager"]).mean())
            print(f"| {file} | {provider} | top-1 {top1:.2f}% | same class as eager {agree:.2f}% |")
    both = [logits.get(("int8.onnx", p)) for p in ("CPUExecutionProvider", "CUDAExecutionProvider")]
    if all(b is not None for b in both):
        print(f"int8.onnx, CUDA against CPU: largest logit difference {float(np.abs(both[0] - both[1]).max()):.2e}")


if __name__ == "__main__":
    {"prepare": prepare, "run": run}[sys.argv[1]](Path(sys.argv[2]))
