"""fxdeploy's ONNX on ONNX Runtime's CUDA provider against its CPU provider, model by model: the
user-written detectors of ``examples/idioms.py``, the example TinyYolo and pose model, and small
models of the ops that passes rewrite (running extrema, order statistics, pairwise distances,
value lookups, a stable sort over ties). A GPU runtime can differ where the CPU one does not (a
TopK that pads rows with its own values: ``docs/internals.md``, "TopK keys on GPU runtimes").

Two steps, since the GPU machine's onnxruntime has no CUDA provider of its own (one is carried
there, ``benchmarks/README.md``, "On the lent GPU's CUDA provider"):

    .venv/bin/python benchmarks/gpu_onnx_sweep.py prepare DIR      # here: lower, check, save
    python3 benchmarks/gpu_onnx_sweep.py run DIR                   # there: CUDA against CPU

``prepare`` lowers each model to ONNX Runtime with the default settings (lower()'s check against
eager on the CPU provider included) at a dynamic batch, and saves its ``model.onnx`` and a batch-3
input, and the TensorRT target's ONNX step (``tensorrt.onnx``: its engine needs TensorRT). ``run``
runs ONNX Runtime's file on the CPU provider and both files on CUDA's (TF32 off), and prints, per
file on CUDA, whether every output has the CPU's shape and dtype, the largest difference of its
float outputs and whether its integer outputs (labels, indices, row counts) are equal, row for row.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

BATCH = 3


def _op_models() -> dict[str, Callable[[], tuple[Any, Any]]]:
    """Small models of the ops that fxdeploy's passes rewrite for the ONNX runtimes."""
    import torch
    from torch import nn

    class Running(nn.Module):  # passes/running_extrema.py
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            best, where = torch.cummax(x, 1)
            return best, where, torch.cummin(x, 2).values

    class Median(nn.Module):  # passes/order_statistics.py
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return (x > x.flatten(1).median(1).values[:, None, None]).float(), x.kthvalue(2, 1).values

    class Nearest(nn.Module):  # passes/pairwise_distances.py
        def __init__(self) -> None:
            super().__init__()
            self.prototypes = nn.Parameter(torch.randn(10, 16))

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            d = torch.cdist(x, self.prototypes[None].expand(len(x), -1, -1))
            return d, d.argmin(-1)

    class Lookup(nn.Module):  # passes/value_lookups.py, a stable sort over ties
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            q = (x * 4).round()
            order = torch.sort(q, dim=-1, descending=True, stable=True).indices
            keep = torch.isin(q, torch.tensor([0.0, 2.0, -3.0]))
            return order, keep, torch.where(keep, x, 0.0).topk(5, -1).values

    gen = torch.Generator().manual_seed(0)
    return {
        "op_running_extrema": lambda: (Running(), (torch.randn(2, 12, 7, generator=gen).round(),)),
        "op_median": lambda: (Median(), (torch.randn(2, 9, 5, generator=gen).round(),)),
        "op_pairwise": lambda: (Nearest(), (torch.randn(2, 20, 16, generator=gen),)),
        "op_lookup_sort": lambda: (Lookup(), (torch.randn(2, 6, 40, generator=gen),)),
    }


def _cases() -> dict[str, tuple[Callable[[], tuple[Any, Any]], Callable[[int], Any]]]:
    """Each model's factory and its batch maker."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import torch

    from examples import idioms, pose
    from examples.detector import tiny_yolo

    cases = {name: (factory, lambda b: (idioms.images(b, 1),)) for name, factory in idioms.FACTORIES.items()}
    seeded = torch.Generator().manual_seed(1)
    cases["tiny_yolo"] = (tiny_yolo, lambda b: (torch.rand(b, 3, 128, 128, generator=seeded),))
    cases["pose"] = (pose.pose, lambda b: (pose.images(b, 1),))
    for name, factory in _op_models().items():
        cases[name] = (factory, _repeat(factory))
    return cases


def _repeat(factory: Callable[[], tuple[Any, Any]]) -> Callable[[int], Any]:
    """A batch of ``b`` made from the example's first rows, repeated and perturbed apart from row 0."""
    import torch

    def make(b: int) -> tuple[Any, ...]:
        (x,) = factory()[1]
        rows = x[:1].repeat(b, *([1] * (x.dim() - 1)))
        return (rows + torch.arange(b, dtype=x.dtype).view(-1, *([1] * (x.dim() - 1))),)

    return make


def prepare(out: Path, *names: str) -> None:
    import fxdeploy

    out.mkdir(parents=True, exist_ok=True)
    for name, (factory, batch) in _cases().items():
        if names and name not in names:
            continue
        model, example = factory()
        try:
            deployed = fxdeploy.lower(model, example, target="onnxruntime",
                                      dynamic_shapes=[{0: ("batch", 1, 8)} for _ in example])
        except fxdeploy.FxDeployError as e:
            print(f"{name}: not lowered: {str(e).splitlines()[0][:200]}")
            continue
        folder = out / name
        deployed.save(folder)
        _tensorrt_onnx(model, example, [i["name"] for i in deployed.manifest["inputs"]], folder)
        inputs = {i["name"]: t.numpy() for i, t in zip(deployed.manifest["inputs"], batch(BATCH), strict=True)}
        np.savez(folder / "inputs.npz", **inputs)
        print(f"{name}: lowered, inputs {json.dumps({k: list(v.shape) for k, v in inputs.items()})}")


def _tensorrt_onnx(model: Any, example: tuple[Any, ...], names: list[str], folder: Path) -> None:
    """``tensorrt.onnx``: the TensorRT target's ONNX step (its engine needs TensorRT)."""
    from gpu_batched_onnx import _one_file  # this folder is on sys.path when a benchmark runs

    from tests.helpers import tensorrt_onnx_file

    written = folder / "tensorrt.dir"
    written.mkdir()
    tensorrt_onnx_file(model, example, {n: {0: ("batch", 1, 8)} for n in names}, written)
    _one_file(written, folder / "tensorrt.onnx")


def run(folder: Path) -> None:
    import onnxruntime as ort

    print("onnxruntime", ort.__version__, "providers available:", ort.get_available_providers())
    cuda = [("CUDAExecutionProvider", {"use_tf32": "0"})]
    print("| model | outputs | shapes and dtypes | largest float difference | integer outputs |")
    print("|---|---:|---|---:|---|")
    for case in sorted(p for p in folder.iterdir() if (p / "model.onnx").is_file()):
        feed = dict(np.load(case / "inputs.npz"))
        cpu = ort.InferenceSession(str(case / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, feed)
        for file in ("model.onnx", "tensorrt.onnx"):
            if (case / file).is_file():
                gpu = ort.InferenceSession(str(case / file), providers=cuda).run(None, feed)
                print(_row(f"{case.name} ({file} on CUDA)", cpu, gpu))


def _row(name: str, cpu: list[np.ndarray], gpu: list[np.ndarray]) -> str:
    same = all(a.shape == b.shape and a.dtype == b.dtype for a, b in zip(cpu, gpu, strict=True))
    floats = [float(np.nanmax(np.abs(a.astype(np.float64) - b))) if a.size else 0.0
              for a, b in zip(cpu, gpu, strict=True) if same and a.dtype.kind == "f"]
    ints = [bool(np.array_equal(a, b)) for a, b in zip(cpu, gpu, strict=True) if same and a.dtype.kind != "f"]
    return (f"| {name} | {len(cpu)} | {'same' if same else 'DIFFER'} | {max(floats, default=0.0):.2e} | "
            f"{sum(ints)} of {len(ints)} equal |")


if __name__ == "__main__":
    {"prepare": prepare, "run": run}[sys.argv[1]](Path(sys.argv[2]), *sys.argv[3:])
