"""Two quick side-by-side ratios: the example detector end-to-end on ORT vs eager (with its own
Python NMS), and fp16 vs fp32 lowering of transformers ResNet-50 on ORT and OpenVINO.

Usage: .venv/bin/python benchmarks/detector_fp16_bench.py
Timing alternates the contenders round by round (interleaved) so load hits both alike.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fxdeploy  # noqa: E402
from examples import detector, models  # noqa: E402
from fxdeploy.settings import Settings  # noqa: E402


def interleaved(fns: dict[str, object], rounds: int, per_round: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        for _ in range(3):
            fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            for _ in range(per_round):
                start = time.perf_counter()
                fn()
                samples[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(v) for name, v in samples.items()}


def main() -> None:
    torch.set_num_threads(2)
    model, (x,) = detector.tiny_yolo()
    x = x[:1]
    deployed = fxdeploy.lower(model, (x,))
    with torch.no_grad():
        medians = interleaved({"eager": lambda: model(x), "fxdeploy-ort": lambda: deployed(x)}, 20, 10)
    ratio = medians["fxdeploy-ort"] / medians["eager"]
    print(f"detector B=1: eager {medians['eager']:.3f} ms, fxdeploy ORT {medians['fxdeploy-ort']:.3f} ms, "
          f"ratio {ratio:.3f} (bar <= 0.3)")

    model, (x,) = models.resnet50()
    for target in ("onnxruntime", "openvino"):
        fp32 = fxdeploy.lower(model, (x,), target=target)
        fp16 = fxdeploy.lower(model, (x,), target=target, settings=Settings(precision="fp16", verify=False))
        with torch.no_grad():
            want = model(x).logits
        error = (fp16(x).logits - want).abs().max().item() / max(1.0, want.abs().max().item())
        medians = interleaved({"fp32": lambda d=fp32: d(x), "fp16": lambda d=fp16: d(x)}, 8, 3)
        print(f"ResNet-50 {target}: fp32 {medians['fp32']:.1f} ms, fp16 {medians['fp16']:.1f} ms, "
              f"fp16/fp32 {medians['fp16'] / medians['fp32']:.3f}, fp16 logits error {error:.3g} of max |logit|")


if __name__ == "__main__":
    main()
