"""YOLO11n with Ultralytics' own ``non_max_suppression(..., multi_label=True)``, no substitution: one
row per (anchor, class) pair that passes, ``i, j = torch.where(cls > conf)``, after the ``if not
x.shape[0]: continue`` that makes capture decide with the example's real values, then ``if n >
max_nms``, which the example takes (tens of thousands of pairs, as at Ultralytics' 30,000 and
640 px). It was refused: torch's fake/real cross-check fixed the ``where``'s count at the
example's (``fxdeploy/capture/real_values.py``), and the head ``[:max_nms]`` that the branch sized
at max_nms was refused (``fxdeploy/passes/padding/row_wise.py``).
"""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from tests.detections import assert_same_detections, without_threshold_flips
from tests.detectors.conftest import require
from tests.helpers import require_target


def in_make_test(test: str, params: dict) -> bool:
    """``make test``: ONNX Runtime (what was refused is capture's, the same for every target; YOLO11n
    runs on every target in ``test_ultralytics.py``); ``make test-full``: every target."""
    return params.get("target", "onnxruntime") == "onnxruntime"


SIZE = 160
"""525 anchors and 80 classes: 42,000 (anchor, class) pairs, some 28,500 of them over ``CONF``."""
CONF, IOU, MAX_DET, MAX_NMS = 0.25, 0.45, 3000, 20000
"""``MAX_DET`` above every image's count: a cap would let ties among equal scores decide the set."""


class MultiLabelYolo(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> list[torch.Tensor]:
        from ultralytics.utils.nms import non_max_suppression

        # max_time_img: a busy CPU must not cut eager short (examples/ultralytics_yolo.py)
        return non_max_suppression(self.model(images), CONF, IOU, multi_label=True, max_det=MAX_DET,
                                   max_nms=MAX_NMS, max_time_img=60.0)


@pytest.fixture(scope="module")
def yolo() -> torch.nn.Module:
    require("ultralytics")
    require("torchvision")  # Ultralytics runs torchvision's NMS once it is imported, as fxdeploy does
    from examples.ultralytics_yolo import build

    return MultiLabelYolo(build("yolo11n.yaml", size=SIZE))


def _images(count: int, seed: int) -> torch.Tensor:
    from examples.ultralytics_yolo import images

    return images(count, seed, size=SIZE)


def _dicts(rows: list[torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    return [{"boxes": r[:, :4], "scores": r[:, 4], "labels": r[:, 5].long()} for r in rows]


def test_the_inputs_take_every_branch(yolo: torch.nn.Module) -> None:
    """Boxes with more than one label, over max_nms pairs, and hundreds of distinct scores an image."""
    with torch.no_grad():
        prediction = yolo.model(_images(2, 0))[0]
        out = yolo(_images(2, 0))
    pairs = (prediction[:, 4:] > CONF).sum((1, 2))
    assert bool((pairs > MAX_NMS).all()), pairs
    for rows in out:
        boxes = rows[:, :4].unique(dim=0)
        assert len(boxes) < len(rows) and len(rows[:, 4].unique()) > 200 and len(rows) < MAX_DET, len(rows)


@pytest.mark.parametrize("target", ["onnxruntime", "openvino", "torchscript"])
def test_multi_label_nms_matches_eager(yolo: torch.nn.Module, target: str) -> None:
    require_target(target)
    deployed = fxdeploy.lower(yolo, (_images(2, 0),), target=target)
    x = _images(2, 3)
    with torch.no_grad():
        want = yolo(x)
    got = deployed(x)
    assert isinstance(got, list) and len(got) == 2 and all(g.shape[1:] == (6,) for g in got)
    # a box at IoU 0.45 +- 1e-3 of a kept one may go either way between runtimes (float noise)
    reference, result, _ = without_threshold_flips(_dicts(want), _dicts(got), IOU)
    assert_same_detections(reference, result, score_atol=1e-4)
