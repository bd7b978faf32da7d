"""Every zoo model (examples/zoo.py) on every target, against eager PyTorch.

Each (model, target) is lowered once, with a dynamic batch and, where the model allows, dynamic
height and width; then it runs at two batch sizes, and at a second resolution. Classifiers are
compared by max abs error, detectors detection by detection (paired by label and IoU) and in
eager's order. A target missing here skips with its reason; a known failure is a strict xfail
with its concrete reason, so it turns into a failure the day it is fixed.

``make test`` runs the ``zoo_fast`` subset (the small ResNet and YOLOS on ONNX Runtime, RT-DETR
on ONNX Runtime, OpenVINO and ncnn);
``make zoo`` runs everything. Lowerings are cached per module, and the cache holds one model at
a time (tests run model by model), so ResNet-50's artifacts are freed before DETR's are built.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import nn

import fxdeploy
from examples.zoo import ZOO, ZooEntry
from fxdeploy.errors import CaptureError
from tests.helpers import require_target as require
from tests.zoo.checks import check_classifier, check_detections
from tests.zoo.known_failures import KNOWN_FAILURES

TARGETS = list(fxdeploy.targets())
TOLERANCE = {"ncnn": 1e-3}
"""Max abs error (detections: score difference); 1e-4 elsewhere."""
BATCHES = (1, 3)
SECOND_RESOLUTION = (96, 160)
FAST = {("resnet_small", "onnxruntime"), ("yolos_small", "onnxruntime"),
        ("rt_detr_small", "onnxruntime"), ("rt_detr_small", "openvino"), ("rt_detr_small", "ncnn")}
"""In ``make test``: RT-DETR with its batch, height and width dynamic at once (its postprocess
loops over the images) on the runtimes that run it."""


def _cases() -> Iterator[Any]:
    """(model, target, check) in model-major order, so the cache can drop a model once it is done."""
    for name in ZOO:
        for target in TARGETS:
            for check in ("batch", "resolution"):
                marks = [pytest.mark.zoo]
                if (name, target) in FAST:
                    marks.append(pytest.mark.zoo_fast)
                if (name, target) in KNOWN_FAILURES:
                    reason, raises = KNOWN_FAILURES[name, target]
                    marks.append(pytest.mark.xfail(reason=reason, raises=raises, strict=True))
                yield pytest.param(name, target, check, marks=marks, id=f"{name}-{target}-{check}")


def batch_only(entry: ZooEntry) -> dict[str, dict[int, Any]]:
    return {name: {d: spec for d, spec in dims.items() if d == 0} for name, dims in entry.dynamic_shapes.items()}


Lowered = tuple[nn.Module, torch.Tensor, fxdeploy.Deployed]


@pytest.fixture(scope="module")
def lowered() -> Iterator[Callable[[str, str, bool], Lowered]]:
    """get(model, target, dynamic_hw): lowered once; a failure is cached and raised again."""
    cache: dict[tuple[str, str, bool], Lowered | BaseException] = {}
    models: dict[str, tuple[nn.Module, torch.Tensor]] = {}

    def get(name: str, target: str, dynamic_hw: bool) -> Lowered:
        if name not in models:
            models.clear()
            cache.clear()
            gc.collect()
            model, (x,) = ZOO[name].factory()
            models[name] = model, x
        model, x = models[name]
        key = (name, target, dynamic_hw)
        if key not in cache:
            entry = ZOO[name]
            dims = entry.dynamic_shapes if dynamic_hw else batch_only(entry)
            try:
                cache[key] = model, x, fxdeploy.lower(
                    model, (x,), target=target, dynamic_shapes=dims, substitutions=entry.substitutions
                )
            except Exception as exc:  # noqa: BLE001 - kept, so the next check of this pair fails the same way
                cache[key] = exc
            assert_untouched(model, entry)
        result = cache[key]
        if isinstance(result, BaseException):
            raise result
        return result

    yield get
    cache.clear()
    models.clear()


def assert_untouched(model: nn.Module, entry: ZooEntry) -> None:
    """Substitutions are scoped to the capture: the classes and instances they touched (the
    processor, RT-DETR's attention modules, ViT's embeddings) are as before."""
    for target in entry.substitutions or {}:
        objects = (*model.modules(), *([model.processor] if hasattr(model, "processor") else []))
        owners = [obj for obj in objects if getattr(type(obj), target.__name__, None) is target]
        assert owners, f"no object in the model has {target.__qualname__}"
        for obj in owners:
            assert target.__name__ not in vars(obj), f"the override of {target.__qualname__} outlived lower()"


def has_dynamic_hw(name: str) -> bool:
    return 2 in ZOO[name].dynamic_shapes["pixel_values"]


def images(batch: int, size: tuple[int, ...], seed: int) -> torch.Tensor:
    return torch.randn(batch, 3, *size, generator=torch.Generator().manual_seed(seed))


def check(name: str, model: nn.Module, deployed: fxdeploy.Deployed, x: torch.Tensor, target: str) -> int:
    """Compare with eager; returns the number of detections matched (0 for a classifier)."""
    tolerance = TOLERANCE.get(target, 1e-4)
    with torch.no_grad():
        want = model(x)
    got = deployed(x)
    if ZOO[name].kind == "detector":
        return check_detections(want, got, tolerance)
    check_classifier(want, got, tolerance)
    return 0


@pytest.mark.parametrize(("name", "target", "check_kind"), list(_cases()))
def test_zoo_matches_eager(lowered, name: str, target: str, check_kind: str) -> None:
    require(target)
    model, example, deployed = lowered(name, target, has_dynamic_hw(name))
    size = tuple(example.shape[2:]) if check_kind == "batch" else SECOND_RESOLUTION
    matched = sum(check(name, model, deployed, images(batch, size, seed), target) for seed, batch in enumerate(BATCHES))
    if ZOO[name].kind == "detector":
        assert matched > 0, "the check is vacuous without detections"
    if check_kind == "batch":  # a per-image artifact keeps its batch range beside the engine's dims
        per_image = deployed.manifest.get("per_image")
        batch = {k: per_image[k] for k in ("min", "opt", "max")} if per_image else deployed.manifest["dims"]["batch"]
        assert batch == {"min": 1, "opt": example.shape[0], "max": 8}


@pytest.mark.zoo
def test_vit_needs_its_position_substitution() -> None:
    """Without examples/zoo_vit.py's substitution, torch.export pins the ViT's H and W to the
    example's (transformers' shortcut for the trained grid size); once this capture succeeds, the
    substitution can go."""
    model, (x,) = ZOO["vit_small"].factory()
    with pytest.raises(CaptureError, match="height|width"):
        fxdeploy.lower(model, (x,), dynamic_shapes=ZOO["vit_small"].dynamic_shapes)
