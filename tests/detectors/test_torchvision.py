"""torchvision's RetinaNet, FCOS, SSD300 and Faster R-CNN as torchvision ships them
(``weights=None``), called the way its users call them, ``model(list_of_images)``, with no
substitution. Their postprocessing filters each level's scores, takes ``topk(min(n, k))``,
concatenates the levels, runs ``batched_nms`` and keeps ``[:detections_per_img]``, image by image;
Faster R-CNN also pools each kept proposal from its pyramid level (``index_put_`` by level) and
filters and NMSes once more; the transform resizes and scales the boxes back. Every target must
match eager detection by detection, at batch 1 and 4, after save/load too, and return
torchvision's own list of dicts.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import fxdeploy
from fxdeploy.capture.substitution import builtin_substitutions
from fxdeploy.parity.excuses import Context
from tests.detections import assert_same_detections
from tests.detectors.conftest import require
from tests.helpers import assert_batched_engine, count_engine_calls, require_target

TARGETS = ["onnxruntime", "openvino", "torchscript", "ncnn"]
MODELS = ["retinanet", "fcos", "ssd300", "fasterrcnn"]
SCORE_TOLERANCE = {"ncnn": 1e-3, "fasterrcnn": 1e-3}
"""Paired scores' tolerance (1e-4 elsewhere): Faster R-CNN's softmax over a second stage moves
scores by up to 3e-4 between runtimes."""
def in_make_test(test: str, params: dict) -> bool:
    """``make test``: RetinaNet (the README's example) on every target, the others on ONNX Runtime;
    ``make test-full``: every model on every target."""
    return params.get("target", "onnxruntime") == "onnxruntime" or params.get("detector") == "retinanet"


@pytest.fixture(scope="module", params=MODELS)
def detector(request: pytest.FixtureRequest) -> torch.nn.Module:
    require("torchvision")
    from examples.torchvision_detectors import build

    return build(request.param)


@pytest.fixture(scope="module")
def eager(detector: torch.nn.Module) -> Callable[[int, int], list[dict[str, torch.Tensor]]]:
    """The eager reference at ``(batch, seed)``, computed once per model for all targets (its
    images and weights are fixed; a ResNet-50 or VGG-16 at batch 8 is the leg's costliest eager call)."""
    from examples.torchvision_detectors import images

    results: dict[tuple[int, int], list[dict[str, torch.Tensor]]] = {}

    def run(batch: int, seed: int) -> list[dict[str, torch.Tensor]]:
        if (batch, seed) not in results:
            with torch.no_grad():
                results[batch, seed] = detector(images(batch, seed))
        return results[batch, seed]

    return run


def _thresholds(detector: torch.nn.Module, score_eps: float) -> Context:
    """The model's own score and NMS thresholds: a detection whose score is within ``score_eps`` of
    the score threshold, or whose IoU with a kept box sits at the NMS threshold, may go either way
    between runtimes' float noise (seen: RetinaNet at batch 8, a score of 0.05 at its 0.05 threshold);
    docs/checking.md."""
    model = detector.model
    heads = model.roi_heads if hasattr(model, "roi_heads") else model
    return Context(iou_threshold=heads.nms_thresh, score_thresholds=(heads.score_thresh,), score_eps=score_eps)


def _cap(detector: torch.nn.Module) -> int:
    model = detector.model
    return model.roi_heads.detections_per_img if hasattr(model, "roi_heads") else model.detections_per_img


def test_inputs_make_parity_meaningful(
    detector: torch.nn.Module, eager: Callable[[int, int], list[dict[str, torch.Tensor]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """50+ distinct scores an image, fewer detections than the cap, and exact score ties between
    NMS candidates in every image (two class outputs share their weights)."""
    from examples.torchvision_detectors import images

    for batch, seed in ((1, 3), (4, 1), (8, 2)):
        for i, result in enumerate(eager(batch, seed)):
            scores = result["scores"]
            assert len(scores.unique()) >= 50, f"image {i}: {len(scores.unique())} distinct scores"
            assert len(scores) < _cap(detector), "the cap would make tie-breaking decide the set"
            assert set(result) == {"boxes", "scores", "labels"}
    tied = _tied_candidates(detector, images(2, 0), monkeypatch)
    assert len(tied) >= 2 and all(n > 0 for n in tied[-2:]), f"tied candidates per NMS call: {tied}"


def _tied_candidates(detector: torch.nn.Module, x: torch.Tensor, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Per call of torchvision's batched_nms (this test only), candidates whose score equals
    another candidate's exactly: of one class where two anchors share their weights (overlapping
    boxes: the NMS's tie order decides), of two classes where two classes do (FCOS, Faster R-CNN)."""
    from torchvision.ops import boxes as box_ops

    original, counts = box_ops.batched_nms, []

    def counting(boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor, iou: float) -> torch.Tensor:
        counts.append(len(scores) - len(scores.unique()))
        return original(boxes, scores, idxs, iou)

    monkeypatch.setattr(box_ops, "batched_nms", counting)
    with torch.no_grad():
        detector(x)
    return counts


@pytest.mark.parametrize("target", TARGETS)
def test_torchvision_detector_without_substitution(
    detector: torch.nn.Module, eager: Callable[[int, int], list[dict[str, torch.Tensor]]], target: str, tmp_path: Path
) -> None:
    require_target(target)
    from examples.torchvision_detectors import images

    # lower()'s own check pairs detections by label and IoU on random images at batch 1 and 2; this
    # test pairs them on fixed, calibrated images at batch 1, 4 and 8 (see test_ultralytics).
    deployed = fxdeploy.lower(detector, (images(2, 0),), target=target,
                              dynamic_shapes={"images": {0: ("batch", 1, 8)}})
    assert set(deployed.manifest["info"]["substitutions"]) <= {s.name for s in builtin_substitutions()}
    deployed.save(tmp_path / "detector")
    assert_batched_engine(deployed, tmp_path / "detector")
    loaded = fxdeploy.load(tmp_path / "detector")
    for batch, seed in ((1, 3), (4, 1), (8, 2)):
        x, want = images(batch, seed), eager(batch, seed)
        for runner in (deployed, loaded) if batch == 1 else (deployed,):  # the loaded artifact: same files
            calls = count_engine_calls(runner)
            got = runner(x)
            assert calls[0] == (batch if target == "ncnn" else 1), f"{calls[0]} engine calls for {batch} images"
            assert isinstance(got, list) and len(got) == batch
            assert all(set(g) == {"boxes", "scores", "labels"} for g in got)
            assert all(g["labels"].dtype == torch.int64 and g["boxes"].shape[1:] == (4,) for g in got)
            name = "fasterrcnn" if type(detector.model).__name__ == "FasterRCNN" else target
            tolerance = max(SCORE_TOLERANCE.get(name, 1e-4), SCORE_TOLERANCE.get(target, 1e-4))
            matched = assert_same_detections(want, got, score_atol=tolerance, ctx=_thresholds(detector, tolerance))
            excused = sum(sum(m.excused.values()) for m in matched)
            assert excused <= max(1, batch // 4), f"{excused} detections excused at the thresholds in {batch} images"
