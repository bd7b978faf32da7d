"""One engine call per batch: a model that loops over its images is captured for one image, and
its per-image graph is vectorized over the batch (fxdeploy.capture.vectorize), so the engine
takes the whole batch; where an op does not vectorize, the engine runs per image, named."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

import fxdeploy
from fxdeploy.cli.report import render_report
from fxdeploy.ops import multiclass_nms
from fxdeploy.parity import compare_outputs
from tests.detections import assert_same_detections
from tests.detectors.test_tiny_yolo import images
from tests.detectors.test_tiny_yolo import tiny_yolo as build_tiny_yolo
from tests.helpers import count_engine_calls, require_target, tensorrt_onnx_file
from tests.integrations.test_triton import assert_matches, parse_config

SHAPES = {"images": {0: ("batch", 1, 8)}}


def _onnx_batch_dim(path: Path) -> str:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return model.graph.input[0].type.tensor_type.shape.dim[0].dim_param


@functools.cache
def tiny_yolo() -> nn.Module:
    """One TinyYolo for the module, never changed by a test: each lowering of it after the first starts
    from its capture (fxdeploy.capture.memo), as lowering one model for several targets in a process does."""
    return build_tiny_yolo()


def _tiny_yolo() -> tuple[nn.Module, Callable[[int, int], torch.Tensor]]:
    return tiny_yolo(), images


@functools.cache
def _pose() -> tuple[nn.Module, Callable[[int, int], torch.Tensor]]:
    from examples import pose

    return pose.pose()[0], pose.images


MODELS = {"tiny_yolo": _tiny_yolo, "pose": _pose}


def in_make_test(test: str, params: dict) -> bool:
    """``make test``: the mask over grid cells at a dynamic H/W on ONNX Runtime (one engine call per
    batch) and ncnn (image by image); ``make test-full`` adds OpenVINO and TorchScript, whose batched
    engines at a dynamic H/W the test beside it covers."""
    return test != "test_a_mask_over_grid_cells_at_a_dynamic_height_and_width" or params["target"] in (
        "onnxruntime", "ncnn")


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("target", ["onnxruntime", "openvino", "torchscript"])
def test_a_per_image_loop_detector_runs_its_batch_in_one_engine_call(target: str, name: str, tmp_path: Path) -> None:
    """examples/detector.py's TinyYolo and examples/pose.py's keypoint detector (every field
    compared, keypoints included), at batch 1, 4 and 8, before and after save/load."""
    require_target(target)
    model, make_images = MODELS[name]()
    deployed = fxdeploy.lower(model, (make_images(2, 0),), target=target, dynamic_shapes=SHAPES)
    manifest = deployed.manifest
    assert manifest["per_image"]["engine"] == "batch", manifest["per_image"]
    assert manifest["inputs"][0]["shape"][0] == "batch"
    assert all(o["shape"][0] == "batch" for o in manifest["outputs"])
    assert [c["shapes"][0][0] for c in manifest["info"]["shape_checks"]] == [2, 1, 2]  # lower()'s own, capped
    assert "the engine takes the whole batch, one call" in render_report(deployed)
    deployed.save(tmp_path / name)
    if target != "torchscript":
        assert _onnx_batch_dim(tmp_path / name / "model.onnx"), "dim 0 of the ONNX input must be symbolic"
    loaded = fxdeploy.load(tmp_path / name)
    for batch, seed in ((1, 3), (4, 1), (8, 2)):
        x = make_images(batch, seed)
        with torch.no_grad():
            want = model(x)
        for runner in (deployed, loaded):
            calls = count_engine_calls(runner)
            got = runner(x)
            assert calls[0] == 1, f"batch {batch}: {calls[0]} engine calls"
            results = compare_outputs(want, got, fxdeploy.parity.Tolerances(score_atol=1e-4))
            assert [r.kind for r in results] == ["detections"] and all(r.ok for r in results), [
                r.detail for r in results]
    for bad, said in ((make_images(9, 0), r"must be in \[1, 8\], got 9"), (make_images(0, 0), "got 0"),
                      (make_images(2, 0).double(), "expected dtype float32")):
        with pytest.raises(fxdeploy.InputError, match=said):  # a batched engine's inputs are checked as before
            loaded(bad)


def test_triton_serves_the_batched_engine_as_triton_would(tmp_path: Path) -> None:
    """Triton's dynamic batcher stacks requests on dim 0 and runs model.onnx once; each request
    takes its rows back and trims them by its count."""
    require_target("onnxruntime")
    import onnxruntime as ort

    from fxdeploy.integrations.triton import export_triton

    model = tiny_yolo()
    deployed = fxdeploy.lower(model, (images(2, 0),), target="onnxruntime", dynamic_shapes=SHAPES)
    deployed.save(tmp_path / "tiny")
    model_dir = export_triton(tmp_path / "tiny", tmp_path / "repo", model_name="tiny")
    config, _ = parse_config(model_dir)
    assert config.max_batch_size == 8 and config.HasField("dynamic_batching")
    assert_matches(model_dir, tmp_path / "tiny", batched=True)  # counts included: dims [1], reshaped to []
    requests = [images(1, seed) for seed in (5, 6, 7, 8)]
    session = ort.InferenceSession(str(model_dir / "1" / "model.onnx"))
    names = [o.name for o in session.get_outputs()]
    outputs = dict(zip(names, session.run(None, {"images": torch.cat(requests).numpy()}), strict=True))
    counts = outputs["row_count_0"]
    got = [
        {key: torch.from_numpy(outputs[f"0.{key}"][i, : int(counts[i])]) for key in ("boxes", "scores", "labels")}
        for i in range(len(requests))
    ]
    with torch.no_grad():
        want = [model(x)[0] for x in requests]
    assert_same_detections(want, got)


class Histograms(nn.Module):
    """A per-image loop over an op with no batching rule (``histc``)."""

    def forward(self, images: torch.Tensor) -> list[torch.Tensor]:
        return [torch.histc(image.flatten(), bins=8, min=0.0, max=1.0) for image in images.sigmoid()]


def test_an_op_that_does_not_vectorize_keeps_the_engine_per_image_and_says_which(
    caplog: pytest.LogCaptureFixture,
) -> None:
    require_target("torchscript")
    model = Histograms()
    with caplog.at_level(logging.INFO, logger="fxdeploy"):
        deployed = fxdeploy.lower(model, (torch.randn(2, 3, 8, 8),), target="torchscript", dynamic_shapes=SHAPES)
    per_image = deployed.manifest["per_image"]
    assert per_image["engine"] == "image" and "histc" in per_image["why"], per_image
    assert any("once per image" in r.getMessage() and "histc" in r.getMessage() for r in caplog.records)
    assert "the engine runs once per image (the per-image graph does not vectorize: aten.histc" in render_report(
        deployed)
    x = torch.randn(3, 3, 8, 8)
    calls = count_engine_calls(deployed)
    torch.testing.assert_close(deployed(x), model(x))
    assert calls[0] == 3


def test_batching_per_image_is_honoured() -> None:
    require_target("onnxruntime")
    deployed = fxdeploy.lower(tiny_yolo(), (images(2, 0),), target="onnxruntime", dynamic_shapes=SHAPES,
                              settings=fxdeploy.Settings(batching="per_image"))
    assert deployed.manifest["per_image"] == {**deployed.manifest["per_image"], "engine": "image",
                                              "why": "Settings.batching is 'per_image'"}
    assert deployed.manifest["inputs"][0]["shape"][0] == 1


class LoopAndBatchMean(nn.Module):
    """Per-image rows, and a value over the whole batch whose shape does not depend on the batch."""

    def forward(self, x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        return [row * 2 for row in x], x.mean(0)


@pytest.mark.parametrize("example_batch", [1, 2])
def test_a_value_computed_from_the_whole_batch_is_refused_naming_the_output(example_batch: int) -> None:
    """Its shape is the same for one image and two, so only its values tell that no per-image run
    can give it; with one example image, the second image is that image's values rolled."""
    require_target("torchscript")
    with pytest.raises(fxdeploy.CaptureError, match=r"output\[1\]: .*computed from the whole batch"):
        fxdeploy.lower(LoopAndBatchMean(), (torch.rand(example_batch, 3, 4),), target="torchscript",
                       dynamic_shapes={"x": {0: ("batch", 1, 8)}})


def test_tensorrt_onnx_carries_the_batch_and_its_profile_spans_min_opt_max(tmp_path: Path) -> None:
    """The TensorRT target's ONNX (what its engine is built from) of a per-image loop detector,
    vectorized: batch 1 and 8 on ONNX Runtime match eager; the profile spans the batch range."""
    import onnxruntime as ort

    from fxdeploy.lowering.tensorrt import profile_shapes

    model = tiny_yolo()
    _, names, job, _ = tensorrt_onnx_file(model, (images(2, 0),), SHAPES, tmp_path)
    assert profile_shapes(job.example_inputs, job.input_names, job.dynamic_shapes)["images"] == (
        [1, 3, 128, 128], [2, 3, 128, 128], [8, 3, 128, 128])
    assert _onnx_batch_dim(tmp_path / "model.onnx")
    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    for batch, seed in ((1, 3), (8, 2)):
        x = images(batch, seed)
        out = dict(zip(names, session.run(None, {"images": x.numpy()}), strict=True))
        got = [{key: torch.from_numpy(out[f"0.{key}"][i, : int(out["row_count_0"][i])])
                for key in ("boxes", "scores", "labels")} for i in range(batch)]
        with torch.no_grad():
            assert_same_detections(model(x), got)


class AnySize(nn.Module):
    """A detector for images of any size (multiples of 16): per image, its best 16 cells by
    score (a fixed count at every size), then NMS; a Python loop over the images, as users write."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, 4, 1), nn.ReLU(), nn.Conv2d(8, 16, 3, 4, 1), nn.ReLU(),
                                 nn.Conv2d(16, 4 + 3, 1))

    def forward(self, images: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        results = []
        height, width = images.shape[2], images.shape[3]
        for out in self.net(images / 255.0):
            rows = out.flatten(1).transpose(0, 1)  # [h * w, 4 + 3]
            scores = (rows[:, 4:] * 8).sigmoid()
            top = scores.amax(1).topk(16).indices
            at = rows[top, :2].sigmoid()
            centers = torch.stack([at[:, 0] * width, at[:, 1] * height], 1)
            sides = rows[top, 2:4].exp() * 2
            boxes = torch.cat([centers - sides, centers + sides], 1)
            det_boxes, det_scores, det_labels = multiclass_nms(
                boxes[None], scores[top][None], iou_threshold=0.6, score_threshold=0.05, keep_top_k=10)[:3]
            kept = det_labels[0] >= 0
            results.append({"boxes": det_boxes[0][kept], "scores": det_scores[0][kept], "labels": det_labels[0][kept]})
        return results


@functools.cache
def any_size() -> AnySize:
    """One for the module, as ``tiny_yolo``."""
    return AnySize().eval()


@pytest.mark.parametrize("target", ["onnxruntime", "openvino", "torchscript"])
def test_a_per_image_loop_keeps_its_dynamic_height_and_width_beside_the_batch(target: str, tmp_path: Path) -> None:
    """A dynamic batch and a dynamic H and W (multiples of its stride 16): captured for one image
    with H and W kept, vectorized with all three dynamic, one engine call per batch, every
    detection as eager's at each batch and size, after save/load too."""
    require_target(target)
    model = any_size()
    h, w = torch.export.Dim("h", min=4, max=10), torch.export.Dim("w", min=4, max=10)
    shapes = {"images": {0: ("batch", 1, 8), 2: 16 * h, 3: 16 * w}}
    deployed = fxdeploy.lower(model, (images(2, 0),), target=target, dynamic_shapes=shapes)
    manifest = deployed.manifest
    assert manifest["per_image"]["engine"] == "batch", manifest["per_image"]
    assert manifest["inputs"][0]["shape"] == ["batch", 3, "16*h", "16*w"]
    assert {name: manifest["dims"][name]["max"] for name in manifest["dims"]} == {"batch": 8, "h": 10, "w": 10}
    deployed.save(tmp_path / "a")
    loaded = fxdeploy.load(tmp_path / "a")
    for batch, size, seed in ((1, (128, 128), 3), (3, (64, 160), 1), (8, (96, 112), 2)):
        x = torch.nn.functional.interpolate(images(batch, seed), size=size, mode="nearest")
        with torch.no_grad():
            want = model(x)
        assert sum(len(image["scores"]) for image in want) > 5 * batch, "too few detections to compare"
        for runner in (deployed, loaded):
            calls = count_engine_calls(runner)
            got = runner(x)
            assert calls[0] == 1, f"batch {batch}: {calls[0]} engine calls"
            assert_same_detections(want, got, score_atol=1e-4)
    with pytest.raises(fxdeploy.InputError, match="16\\*h"):
        loaded(images(2, 0)[..., :120, :])


@pytest.mark.parametrize("target", ["onnxruntime", "openvino", "torchscript", "ncnn"])
def test_a_mask_over_grid_cells_at_a_dynamic_height_and_width(target: str) -> None:
    """TinyYolo's ``boxes[image][conf > t]``: its candidate rows are the grid cells, as many as the
    image size gives. With H and W dynamic the selection is padded to the cells of the largest
    size (1,280 at 256 x 256), every detection as eager's at each batch and size; one engine call
    per batch on ONNX Runtime, OpenVINO and TorchScript (ncnn runs image by image). Refused
    before ("a mask over rows of a dynamic size ...; capture one image")."""
    require_target(target)
    model = tiny_yolo()
    shapes = {"images": {0: ("batch", 1, 8), 2: ("h", 64, 256), 3: ("w", 64, 256)}}
    deployed = fxdeploy.lower(model, (images(2, 0),), target=target, dynamic_shapes=shapes)
    assert deployed.manifest["inputs"][0]["shape"][1:] == [3, "h", "w"]  # ncnn's engine input: one image
    for batch, size, seed in ((1, (128, 128), 3), (3, (64, 224), 1), (8, (96, 160), 2), (2, (256, 256), 0)):
        x = torch.nn.functional.interpolate(images(batch, seed), size=size, mode="nearest")
        with torch.no_grad():
            want = model(x)
        assert sum(len(image["scores"]) for image in want) > 5 * batch, "too few detections to compare"
        calls = count_engine_calls(deployed)
        got = deployed(x)
        assert calls[0] == (batch if target == "ncnn" else 1), f"batch {batch}: {calls[0]} engine calls"
        assert_same_detections(want, got, score_atol=1e-4)
