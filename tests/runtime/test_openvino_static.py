"""OpenVINO compiles a dynamic-shaped artifact again for the input shapes it is called with twice
(``fxdeploy.runtime.openvino_static``): same outputs as the dynamic model, within its limit."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import torch

import fxdeploy
from fxdeploy.runtime.openvino_static import StaticShapes
from fxdeploy.targets.sections import OpenVinoSettings
from tests.detections import assert_same_detections
from tests.detectors.test_tiny_yolo import images, tiny_yolo
from tests.helpers import max_abs_error, require_target

DYNAMIC_BATCH = {"images": {0: ("batch", 1, 8)}}


def _static_models(deployed: fxdeploy.Deployed) -> dict[tuple, object]:
    return {shapes: model for shapes, model in deployed.executor._static._compiled.items() if model is not None}


def test_a_shape_called_twice_runs_on_its_own_static_model_with_the_same_detections() -> None:
    require_target("openvino")
    model = tiny_yolo()
    deployed = fxdeploy.lower(model, (images(2, 0),), target="openvino", dynamic_shapes=DYNAMIC_BATCH)
    before = set(_static_models(deployed))  # lower()'s check calls some shapes; they may be compiled
    x = images(3, 5)
    with torch.no_grad():
        want = model(x)
    assert sum(len(image["scores"]) for image in want) > 30, "too few detections to compare"
    got = [deployed(x) for _ in range(3)]  # the first on the dynamic model (unless the check saw (3, ...))
    key = ((0, tuple(x.shape)),)
    assert key in _static_models(deployed), f"no static model for {key}; have {set(_static_models(deployed))}"
    for out in got:
        assert_same_detections(want, out, score_atol=1e-4)
    assert max_abs_error(got[2], got[0]) < 1e-5
    once = images(5, 6)
    deployed(once)
    assert ((0, tuple(once.shape)),) not in set(_static_models(deployed)) - before, "compiled after one call"


def test_the_limit_is_kept() -> None:
    require_target("openvino")
    model = tiny_yolo()
    settings = fxdeploy.Settings().with_sections(openvino=OpenVinoSettings(static_shapes=1))
    deployed = fxdeploy.lower(model, (images(2, 0),), target="openvino", dynamic_shapes=DYNAMIC_BATCH,
                              settings=settings)
    for batch in (2, 2, 4, 4, 4):
        x = images(batch, batch)
        with torch.no_grad():
            assert_same_detections(model(x), deployed(x), score_atol=1e-4)
    assert set(_static_models(deployed)) == {((0, (2, 3, 128, 128)),)}


def test_zero_compiles_nothing() -> None:
    require_target("openvino")
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
    settings = fxdeploy.Settings().with_sections(openvino=OpenVinoSettings(static_shapes=0))
    deployed = fxdeploy.lower(model, (torch.randn(2, 3, 16, 16),), target="openvino", settings=settings,
                              dynamic_shapes={"input": {0: ("batch", 1, 8)}})
    for _ in range(3):
        x = torch.randn(3, 3, 16, 16)
        assert max_abs_error(deployed(x), model(x).detach()) < 1e-4
    assert not _static_models(deployed)


def test_a_static_artifact_compiles_nothing_more() -> None:
    require_target("openvino")
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
    deployed = fxdeploy.lower(model, (torch.randn(1, 3, 16, 16),), target="openvino")
    for _ in range(3):
        deployed(torch.randn(1, 3, 16, 16))
    assert deployed.executor._static.limit == 0 and not _static_models(deployed)


def test_a_failed_compile_leaves_the_shape_on_the_dynamic_model(caplog: pytest.LogCaptureFixture) -> None:
    def fails(shapes: dict[int, list[int]]) -> object:
        raise RuntimeError(f"cannot reshape to {shapes}")

    static = StaticShapes(True, 4, fails)
    key = ((0, (2, 3)),)
    with caplog.at_level(logging.DEBUG, logger="fxdeploy.runtime.openvino_static"):
        assert [static.compiled(key) for _ in range(3)] == [None, None, None]
    assert "cannot reshape to {0: [2, 3]}" in caplog.text and caplog.text.count("no static model") == 1


def test_threads_asking_for_one_shape_compile_it_once() -> None:
    compiled: list[dict[int, list[int]]] = []

    def slow(shapes: dict[int, list[int]]) -> object:
        time.sleep(0.05)
        compiled.append(shapes)
        return object()

    static = StaticShapes(True, 4, slow)
    key = ((0, (1, 3)), (1, (1,)))
    static.compiled(key)
    results: list[object] = []
    threads = [threading.Thread(target=lambda: results.append(static.compiled(key))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert compiled == [{0: [1, 3], 1: [1]}] and len({id(r) for r in results}) == 1 and results[0] is not None


def test_a_negative_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="Settings.openvino.static_shapes must be >= 0, got -1"):
        OpenVinoSettings(static_shapes=-1)
