"""examples/yolov5_loop.py, YOLOv5's classic per-image NMS loop with its unconditional pre-sort
``x[x[:, 4].argsort(descending=True)[:max_nms]]``, lowered with the default settings and a dynamic
batch on every target, matches eager detection by detection at batch 1 and 3."""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from examples.yolov5_loop import yolov5_loop
from tests.detections import assert_same_detections
from tests.helpers import require_target

TARGETS = ["onnxruntime", "openvino", "torchscript", "ncnn"]


def _dicts(results: list[torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    return [{"boxes": r[:, :4], "scores": r[:, 4], "labels": r[:, 5].long()} for r in results]


def _images(batch: int) -> torch.Tensor:
    return torch.rand(batch, 3, 128, 128, generator=torch.Generator().manual_seed(batch))


def test_the_inputs_exercise_the_pre_sort() -> None:
    """More rows pass the filters than max_nms keeps, and the NMS drops some of the rest: the
    sort decides which rows reach the NMS."""
    model, _ = yolov5_loop()
    with torch.no_grad():
        prediction = model.decode(_images(3))
        out = model(_images(3))
    conf = (prediction[..., 5:] * prediction[..., 4:5]).amax(-1)
    candidates = ((prediction[..., 4] > 0.25) & (conf > 0.25)).sum(1)
    assert bool((candidates > 2 * model.max_nms).all()), candidates
    assert all(20 < len(detections) < model.max_nms for detections in out), [len(d) for d in out]


@pytest.mark.parametrize("target", TARGETS)
def test_yolov5_loop_matches_eager(target: str) -> None:
    require_target(target)
    model, (x,) = yolov5_loop()
    deployed = fxdeploy.lower(model, (x,), target=target, dynamic_shapes={"images": {0: ("batch", 1, 8)}})
    assert deployed.manifest["per_image"]["dim"] == "batch"
    assert deployed.manifest["info"]["substitutions"] == []
    if target == "ncnn":  # host stages run between the engine stages: ncnn's threads must not spin there
        assert [net.opt.openmp_blocktime for net in deployed.executor.nets] == [0] * len(deployed.executor.nets)
    for batch in (1, 3):
        images = _images(batch)
        with torch.no_grad():
            want = model(images)
        got = deployed(images)
        assert isinstance(got, list) and len(got) == batch
        matches = assert_same_detections(_dicts(want), _dicts(got))
        assert sum(m.matched for m in matches) == sum(len(w) for w in want) > 20 * batch
