"""One backend-agnostic suite, parametrized by target: lower, run at two batch sizes, compare.

A target that cannot run here skips with its reason (``fxdeploy.targets()``); nothing else skips.
Lowering is the slow part, so each (model, target) is lowered once per module.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import fxdeploy
from examples import models
from tests.detections import assert_detections_match, padding_problems
from tests.helpers import max_abs_error, run_python
from tests.helpers import require_target as require

TARGETS = ["onnxruntime", "openvino", "ncnn", "torchscript", "tensorrt"]
TOLERANCE = {"onnxruntime": 1e-4, "openvino": 1e-4, "torchscript": 1e-4, "ncnn": 1e-3, "tensorrt": 1e-3}
BATCHES = (1, 5)
KEEP = 20


class TinyDetector(nn.Module):
    """Conv features → boxes and class scores → multiclass_nms → rescaled boxes (post-NMS work)."""

    def __init__(self, classes: int = 3) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=4, padding=1)
        self.box = nn.Conv2d(8, 4, 1)
        self.cls = nn.Conv2d(8, classes, 1)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = torch.relu(self.conv(x))
        raw = torch.sigmoid(self.box(h)).flatten(2).transpose(1, 2) * 64
        boxes = torch.cat([raw[..., :2], raw[..., :2] + raw[..., 2:]], -1)
        scores = torch.sigmoid(self.cls(h)).flatten(2).transpose(1, 2)
        det_boxes, det_scores, labels, num = fxdeploy.ops.multiclass_nms(
            boxes, scores, iou_threshold=0.5, score_threshold=0.3, keep_top_k=KEEP
        )
        return {"boxes": det_boxes / 64.0, "scores": det_scores, "labels": labels, "num": num,
                "feature": h.mean((2, 3))}


def tiny_detector() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return TinyDetector().eval(), (torch.randn(2, 3, 32, 32),)


FACTORIES: dict[str, Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]] = {
    "convnet": models.convnet, "dict_mlp": models.dict_mlp, "vit_tiny": models.vit_tiny,
}


@pytest.fixture(scope="module")
def lowered() -> Callable[[str, str], tuple[nn.Module, torch.Tensor, fxdeploy.Deployed]]:
    cache: dict[tuple[str, str], tuple[nn.Module, torch.Tensor, fxdeploy.Deployed]] = {}
    built: dict[str, tuple[nn.Module, tuple[torch.Tensor, ...]]] = {}  # one model object per name: one capture (memo)

    def get(model_name: str, target: str) -> tuple[nn.Module, torch.Tensor, fxdeploy.Deployed]:
        require(target)
        if (model_name, target) not in cache:
            if model_name not in built:
                built[model_name] = (tiny_detector if model_name == "detector" else FACTORIES[model_name])()
            model, (x,) = built[model_name]
            name = next(iter(inspect.signature(model.forward).parameters))
            deployed = fxdeploy.lower(model, (x,), target=target, dynamic_shapes={name: {0: ("batch", 1, 8)}})
            cache[model_name, target] = model, x, deployed
        return cache[model_name, target]

    return get


def _plain(outputs: Any) -> Any:
    return outputs.to_tuple() if hasattr(outputs, "to_tuple") else outputs


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("model_name", sorted(FACTORIES))
def test_parity_with_eager_at_two_batch_sizes(lowered, model_name: str, target: str) -> None:
    model, x, deployed = lowered(model_name, target)
    for batch in BATCHES:
        xb = torch.randn(batch, *x.shape[1:])
        with torch.no_grad():
            want = _plain(model(xb))
        error = max_abs_error(_plain(deployed(xb)), want)
        assert error <= TOLERANCE[target], f"{model_name} on {target}, batch {batch}: max error {error:.3g}"
    assert deployed.manifest["runtime_version"] == fxdeploy.targets()[target].version
    assert deployed.manifest["dims"]["batch"] == {"min": 1, "opt": x.shape[0], "max": 8}


def _nms_outputs(result: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return result["boxes"], result["scores"], result["labels"], result["num"]


@pytest.mark.parametrize("target", TARGETS)
def test_detector_with_nms_matches_eager(lowered, target: str) -> None:
    """multiclass_nms gives the same detections on every target (paired by label and IoU)."""
    model, x, deployed = lowered("detector", target)
    for batch in BATCHES:
        xb = torch.randn(batch, *x.shape[1:])
        with torch.no_grad():
            want = model(xb)
        got = deployed(xb)
        assert {k: v.dtype for k, v in got.items()} == {k: v.dtype for k, v in want.items()}
        assert got["boxes"].shape == (batch, KEEP, 4)
        assert_detections_match(_nms_outputs(want), _nms_outputs(got), score_atol=TOLERANCE[target])
        assert not padding_problems(_nms_outputs(got))
        assert (got["feature"] - want["feature"]).abs().max() <= TOLERANCE[target]


def test_ncnn_runs_nms_on_the_host(lowered) -> None:
    _, _, deployed = lowered("detector", "ncnn")
    assert "host_postprocess_split" in deployed.report.fired
    assert "host.1.pt" in deployed.manifest["files"]


@pytest.mark.parametrize("target", TARGETS)
def test_save_then_load_in_fresh_process_gives_identical_outputs(
    lowered, target: str, tmp_path: Path
) -> None:
    artifacts = {}
    for model_name in ("dict_mlp", "detector"):
        _, x, deployed = lowered(model_name, target)
        path = deployed.save(tmp_path / model_name)
        torch.save(x, tmp_path / f"{model_name}_x.pt")
        torch.save(deployed.execute({deployed.input_names[0]: x}), tmp_path / f"{model_name}_want.pt")
        artifacts[model_name] = str(path)
    out = run_python(
        "import torch, fxdeploy\n"
        f"for name, path in {artifacts!r}.items():\n"
        "    d = fxdeploy.load(path)\n"
        f"    x = torch.load({str(tmp_path)!r} + f'/{{name}}_x.pt')\n"
        f"    want = torch.load({str(tmp_path)!r} + f'/{{name}}_want.pt')\n"
        "    got = d.execute({d.input_names[0]: x})\n"
        "    assert list(got) == list(want), (list(got), list(want))\n"
        "    print(name, d.target, all(torch.equal(got[k], want[k]) for k in want))\n"
    )
    assert out.split() == ["dict_mlp", target, "True", "detector", target, "True"]


def test_torchscript_artifact_loads_without_fxdeploy(lowered, tmp_path: Path) -> None:
    """model.pt carries the scripted NMS kernel: plain torch.jit.load runs it, fxdeploy never imported."""
    model, x, deployed = lowered("detector", "torchscript")
    path = deployed.save(tmp_path / "ts")
    xb = torch.randn(3, *x.shape[1:])
    torch.save(xb, tmp_path / "x.pt")
    torch.save(deployed.execute({"x": xb}), tmp_path / "want.pt")
    out = run_python(
        "import sys, torch\n"
        f"module = torch.jit.load({str(path / 'model.pt')!r})\n"
        f"want = torch.load({str(tmp_path / 'want.pt')!r})\n"
        f"got = module(torch.load({str(tmp_path / 'x.pt')!r}))\n"
        "print(all(torch.equal(g, w) for g, w in zip(got, want.values(), strict=True)))\n"
        "print('fxdeploy' in sys.modules)\n",
        env={"PYTHONPATH": ""},
    )
    assert out.split() == ["True", "False"]


@pytest.mark.parametrize("target", TARGETS)
def test_concurrent_execute_calls_give_the_same_outputs(lowered, target: str) -> None:
    """Executors that claim thread safety (per-thread requests, per-call extractors) keep it."""
    _, x, deployed = lowered("convnet", target)
    inputs = [torch.randn(2, *x.shape[1:]) for _ in range(8)]
    want = [deployed.execute({"x": xi})["output"] for xi in inputs]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(lambda xi: deployed.execute({"x": xi})["output"], inputs))
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


def test_openvino_compiles_in_fp32_with_the_configured_threads(lowered) -> None:
    """OpenVINO's CPU plugin picks bf16 by itself where the CPU has it; fxdeploy asks for f32."""
    import openvino

    _, _, deployed = lowered("convnet", "openvino")
    compiled = deployed.executor.compiled
    assert compiled.get_property("INFERENCE_PRECISION_HINT") == openvino.Type.f32
    assert compiled.get_property("INFERENCE_NUM_THREADS") == fxdeploy.Settings().threads


def test_ncnn_runs_in_fp32_with_the_configured_threads(lowered) -> None:
    _, _, deployed = lowered("convnet", "ncnn")
    opt = deployed.executor.nets[0].opt
    flags = (opt.use_fp16_storage, opt.use_fp16_arithmetic, opt.use_fp16_packed, opt.use_bf16_storage)
    assert not any(flags)
    assert opt.num_threads == fxdeploy.Settings().threads
    assert opt.openmp_blocktime == 20  # no host stages: ncnn's own default spin between layers


class CumProd(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumprod(x, -1)


def test_ncnn_names_the_op_it_cannot_run() -> None:
    require("ncnn")
    with pytest.raises(fxdeploy.LoweringError, match=r"ncnn: pnnx left op\(s\) that ncnn cannot run: torch\.cumprod"):
        fxdeploy.lower(CumProd(), (torch.randn(2, 16),), target="ncnn", dynamic_shapes={"x": {0: "batch"}})
