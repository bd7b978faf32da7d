"""Ultralytics YOLO11n and YOLOv8n, built from their yaml, followed by Ultralytics' own
``non_max_suppression``, with no substitution: a Python loop over the images, a score filter
twice, an in-place box conversion, ``if not n: continue``, torchvision's NMS, ``[:max_det]``.
Every target must match eager detection by detection, at batch 1 and 4, after save/load too.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import fxdeploy
from fxdeploy.capture.substitution import builtin_substitutions
from tests.detections import assert_same_detections, without_threshold_flips
from tests.detectors.conftest import require
from tests.helpers import assert_batched_engine, count_engine_calls, require_target

TARGETS = ["onnxruntime", "openvino", "torchscript", "ncnn"]
CONFIGS = ["yolo11n.yaml", "yolov8n.yaml"]
MAX_DET = 1000
"""Above every image's count: a cap would let tie-breaking among equal scores decide the set."""
SCORE_TOLERANCE = {"ncnn": 1e-3}


def in_make_test(test: str, params: dict) -> bool:
    """``make test``: YOLO11n (the README's example) on every target and its ties on ONNX Runtime
    (whose own Sigmoid the ties need a pass for), YOLOv8n's inputs and its ONNX Runtime artifact;
    ``make test-full``: both everywhere."""
    if test == "test_inputs_make_parity_meaningful":
        return True
    if test == "test_yolo_at_a_dynamic_height_and_width":
        return params.get("yolo") == "yolo11n.yaml"
    if test == "test_exact_score_ties":
        return params.get("yolo") == "yolo11n.yaml" and params.get("target") == "onnxruntime"
    return params.get("yolo") == "yolo11n.yaml" or params.get("target") == "onnxruntime"


@pytest.fixture(scope="module", params=CONFIGS)
def yolo(request: pytest.FixtureRequest) -> torch.nn.Module:
    require("ultralytics")
    # Ultralytics runs torchvision's NMS once torchvision is imported, and its own TorchNMS before:
    # the two break exact score ties differently. fxdeploy imports torchvision (its NMS
    # substitutions), so eager is compared with torchvision imported, as Ultralytics' users run it.
    require("torchvision")
    from examples.ultralytics_yolo import YoloWithNMS, build

    return YoloWithNMS(build(request.param), max_det=MAX_DET)


def as_detections(rows: list[torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    """Ultralytics' [n, 6] rows (x1, y1, x2, y2, conf, cls) as the matcher's per-image dicts."""
    return [{"boxes": r[:, :4], "scores": r[:, 4], "labels": r[:, 5].long()} for r in rows]


def test_inputs_make_parity_meaningful(yolo: torch.nn.Module, monkeypatch: pytest.MonkeyPatch) -> None:
    """50+ distinct scores an image, fewer detections than the cap, and exact score ties between
    NMS candidates in at least two images of the batch (the flat patches of ``images``)."""
    import torchvision

    from examples.ultralytics_yolo import images

    original, tied = torchvision.ops.nms, []

    def counting(boxes: torch.Tensor, scores: torch.Tensor, iou: float) -> torch.Tensor:
        tied.append(len(scores) - len(scores.unique()))  # one call per image
        return original(boxes, scores, iou)

    monkeypatch.setattr(torchvision.ops, "nms", counting)  # this test only: eager inputs are counted
    for batch, seed in ((1, 3), (4, 1)):
        tied.clear()
        with torch.no_grad():
            out = yolo(images(batch, seed))
        for i, rows in enumerate(out):
            assert len(rows[:, 4].unique()) >= 50, f"image {i}: {len(rows[:, 4].unique())} distinct scores"
            assert len(rows) < MAX_DET
    assert len(tied) == 4 and sum(n > 0 for n in tied) >= 2, f"tied NMS candidates per image: {tied}"


@pytest.mark.parametrize("target", ["torchscript", "onnxruntime"])
def test_exact_score_ties(yolo: torch.nn.Module, target: str) -> None:
    """Images whose class scores saturate at exactly 1.0 for many anchors: the NMS contract's tie
    order (lower index first) decides which of two overlapping tied boxes survives."""
    from examples.ultralytics_yolo import YoloWithNMS, build, images

    saturated = build(yolo.model.yaml["yaml_file"], class_scale=0.45, class_bias=-2.2)
    yolo = YoloWithNMS(saturated, max_det=MAX_DET)
    x = images(4, 1, contrast=2.2)
    with torch.no_grad():
        want = yolo(x)
    assert all(len(r[:, 4].unique()) < len(r) for r in want[:2]), "the first two images have exact ties"
    deployed = fxdeploy.lower(yolo, (x[2:],), target=target, dynamic_shapes={"images": {0: ("batch", 1, 8)}})
    # ONNX Runtime's own Sigmoid gives 0.9999999 where torch's gives 1.0: passes/exact_score_sigmoid.py
    assert_same_detections(as_detections(want), as_detections(deployed(x)))


@pytest.mark.parametrize("target", TARGETS)
def test_yolo_with_ultralytics_nms_without_substitution(yolo: torch.nn.Module, target: str, tmp_path: Path) -> None:
    require_target(target)
    from examples.ultralytics_yolo import images

    # lower()'s own check draws random images at batch 8 and wants every detection paired by value; with
    # 400 boxes an image, one whose IoU sits at the NMS threshold can flip between runtimes' float
    # noise (seen on YOLOv8n). The check here pairs by label and IoU on fixed images instead.
    with torch.no_grad():
        before = yolo(images(2, 5))
    deployed = fxdeploy.lower(yolo, (images(2, 0),), target=target, dynamic_shapes={"images": {0: ("batch", 1, 8)}})
    _assert_untouched(yolo, before)
    assert set(deployed.manifest["info"]["substitutions"]) <= {s.name for s in builtin_substitutions()}
    deployed.save(tmp_path / "yolo")
    assert_batched_engine(deployed, tmp_path / "yolo")
    loaded = fxdeploy.load(tmp_path / "yolo")
    for batch, seed in ((1, 3), (4, 1), (8, 2)):
        x = images(batch, seed)
        with torch.no_grad():
            want = yolo(x)
        for runner in (deployed, loaded) if batch == 1 else (deployed,):  # the loaded artifact: same files
            calls = count_engine_calls(runner)
            got = runner(x)
            assert calls[0] == (batch if target == "ncnn" else 1), f"{calls[0]} engine calls for {batch} images"
            assert isinstance(got, list) and len(got) == batch
            assert all(g.shape[1:] == (6,) and g.dtype == torch.float32 for g in got)
            tolerance = SCORE_TOLERANCE.get(target, 1e-4)
            # a box at IoU 0.45 +- 1e-3 of a kept one may go either way between runtimes (float noise)
            reference, result, _ = without_threshold_flips(as_detections(want), as_detections(got), yolo.iou)
            assert_same_detections(reference, result, score_atol=tolerance)


@pytest.mark.parametrize("target", ["onnxruntime"])  # OpenVINO reads the same ONNX: tests/capture/test_real_values.py
def test_yolo_at_a_dynamic_height_and_width(yolo: torch.nn.Module, target: str) -> None:
    """Batch, height and width dynamic at once (as Ultralytics' ``export(dynamic=True)``): every
    detection as eager's at other sizes. Before, the capture's real-value retry fixed the area at
    the example's (``16*((H-1)//4 + 1)*((W-1)//4 + 1) == 102400``, from torch's cross-check of a
    C2f chunk's offset), and other sizes were refused (``fxdeploy/capture/real_values.py``)."""
    require_target(target)
    from examples.ultralytics_yolo import images

    h, w = torch.export.Dim("h", min=4, max=20), torch.export.Dim("w", min=4, max=20)
    shapes = {"images": {0: ("batch", 1, 8), 2: 32 * h, 3: 32 * w}}
    deployed = fxdeploy.lower(yolo, (images(2, 0),), target=target, dynamic_shapes=shapes)
    assert deployed.manifest["inputs"][0]["shape"] == ["batch", 3, "32*h", "32*w"]
    for batch, size, seed in ((3, (256, 384), 3), (2, (640, 480), 1), (1, (160, 128), 2)):
        x = torch.nn.functional.interpolate(images(batch, seed), size=size, mode="bilinear")
        with torch.no_grad():
            want = yolo(x)
        calls = count_engine_calls(deployed)
        got = deployed(x)
        assert calls[0] == 1, f"{calls[0]} engine calls for {batch} images"
        reference, result, _ = without_threshold_flips(as_detections(want), as_detections(got), yolo.iou)
        assert sum(len(r["scores"]) for r in reference) > 50 * batch, "too few detections to compare"
        assert_same_detections(reference, result, score_atol=1e-4)


def _assert_untouched(yolo: torch.nn.Module, before: list[torch.Tensor]) -> None:
    """Capture runs forward several times (one image, the real-value retry); the Detect head's
    cached anchors must not keep a traced value, and eager results on ``images(2, 5)`` must stay
    ``before``."""
    from examples.ultralytics_yolo import images

    head = yolo.model.model[-1]
    assert all(type(v) is torch.Tensor for v in vars(head).values() if isinstance(v, torch.Tensor))
    with torch.no_grad():
        after = yolo(images(2, 5))
    assert len(before) == len(after) and all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
