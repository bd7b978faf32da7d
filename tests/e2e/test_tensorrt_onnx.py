"""The TensorRT target's numerics, proven where no GPU exists.

``fxdeploy.targets.tensorrt.tensorrt_onnx`` writes exactly the ONNX that the engine is built from
(standard NMS flavour: ONNX NonMaxSuppression, which the TensorRT parser maps to INMSLayer). Here
that ONNX runs on ONNX Runtime and must match eager PyTorch. The engine build itself needs
TensorRT and a GPU, and its tests skip with the target's reason.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import onnxruntime as ort
import torch

import fxdeploy
from examples import models
from fxdeploy.capture import capture
from fxdeploy.passes.base import run_pipeline
from fxdeploy.passes.record import record, update
from fxdeploy.targets import LoweringJob, get_target
from fxdeploy.targets.tensorrt import tensorrt_onnx
from tests.detections import assert_detections_match, padding_problems
from tests.e2e.test_targets import KEEP, tiny_detector
from tests.helpers import require_target

DYNAMIC = {"x": {0: ("batch", 1, 8)}}


def tensorrt_flavoured_onnx(model: torch.nn.Module, x: torch.Tensor, out_dir: Path) -> tuple[Path, list[str]]:
    """Capture, run the tensorrt pipeline, and stop after the ONNX step of the tensorrt target."""
    settings = fxdeploy.Settings()
    captured = capture(model, (x,), dynamic_shapes=DYNAMIC, settings=settings)
    gm = captured.graph_module
    update(gm, output_names=tuple(captured.output_names))
    gm, _ = run_pipeline(gm, get_target("tensorrt").pipeline, settings)
    names = [leaf["name"] for leaf in record(gm).output_leaves if leaf["kind"] != "constant"]
    job = LoweringJob(
        gm, captured.example_inputs, captured.input_names, names, captured.export_dynamic_shapes,
        settings, out_dir,
    )
    lowered = tensorrt_onnx(job)
    assert lowered.files[0] == "model.onnx"
    assert all((out_dir / name).is_file() for name in lowered.files)
    return out_dir / "model.onnx", names


def run_on_ort(path: Path, x: torch.Tensor) -> list[torch.Tensor]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return [torch.from_numpy(a) for a in session.run(None, {"x": x.numpy()})]


def test_convnet_onnx_for_tensorrt_matches_eager_on_onnxruntime(tmp_path: Path) -> None:
    model, (x,) = models.convnet()
    path, _ = tensorrt_flavoured_onnx(model, x, tmp_path)
    onnx.checker.check_model(str(path))
    for batch in (1, 5):
        xb = torch.randn(batch, *x.shape[1:])
        with torch.no_grad():
            want = model(xb)
        (got,) = run_on_ort(path, xb)
        assert (got - want).abs().max() <= 1e-4


def test_detector_onnx_for_tensorrt_uses_standard_nms_and_matches_eager(tmp_path: Path) -> None:
    model, (x,) = tiny_detector()
    path, names = tensorrt_flavoured_onnx(model, x, tmp_path)
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    op_types = {node.op_type for node in proto.graph.node}
    assert "NonMaxSuppression" in op_types
    assert {node.domain for node in proto.graph.node} <= {"", "ai.onnx"}, "plugin op in standard flavour"
    for batch in (1, 3):
        xb = torch.randn(batch, *x.shape[1:])
        with torch.no_grad():
            want = model(xb)
        got = dict(zip(names, run_on_ort(path, xb), strict=True))
        result = (got["boxes"], got["scores"], got["labels"], got["num"])
        assert got["boxes"].shape == (batch, KEEP, 4)
        assert_detections_match((want["boxes"], want["scores"], want["labels"], want["num"]), result)
        assert not padding_problems(result)


def test_tensorrt_engine_build_records_its_optimization_profile() -> None:
    require_target("tensorrt")
    model, (x,) = models.convnet()
    deployed = fxdeploy.lower(model, (x,), target="tensorrt", dynamic_shapes=DYNAMIC)
    assert "model.plan" in deployed.manifest["files"]
    assert deployed.manifest["info"]["tensorrt_profile"]["x"]["max"][0] == 8
