"""A real library detector (kornia's FaceDetector, YuNet with random weights) on ONNX Runtime."""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from tests.detections import assert_same_detections

pytest.importorskip("kornia", reason="kornia is a dev dependency: pip install -e .[dev]")

from examples import face_detector  # noqa: E402


def _as_dicts(per_image: list[torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    """(N, 15) rows: 4 box coords, 10 landmark coords, score. One class: label 0."""
    return [
        {"boxes": d[:, :4], "scores": d[:, 14], "labels": torch.zeros(len(d), dtype=torch.long)} for d in per_image
    ]


@pytest.fixture(scope="module")
def lowered():
    model, (x,) = face_detector.kornia_yunet()
    subs = face_detector.substitutions()
    detector_class = next(iter(subs))
    deployed = fxdeploy.lower(model, (x,), dynamic_shapes={"image": {0: ("batch", 1, 4)}}, substitutions=subs)
    assert face_detector._face_detector_class().postprocess is detector_class  # the class is untouched
    return model, deployed


@pytest.mark.parametrize("batch", [1, 4])
def test_face_detections_match_eager(lowered, batch: int) -> None:
    model, deployed = lowered
    images = torch.rand(batch, 3, 160, 160, generator=torch.Generator().manual_seed(batch)) * 255
    with torch.no_grad():
        want = model(images)  # kornia's own postprocess and Python NMS
    got = deployed(images)
    assert [g.shape[1] for g in got] == [15] * batch
    assert sum(len(w) for w in want) > 0
    assert_same_detections(_as_dicts(want), _as_dicts(got), iou=0.99, score_atol=1e-4)
    for g, w in zip(got, want, strict=True):  # landmarks of the same face (paired by box) agree
        if len(w):
            pair = torch.cdist(g[:, :4], w[:, :4]).argmin(1)
            assert (g[:, 4:14] - w[pair, 4:14]).abs().max().item() < 1e-2
