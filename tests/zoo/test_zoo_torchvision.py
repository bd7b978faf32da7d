"""torchvision's detectors (examples/zoo_torchvision.py) on every target, against eager torchvision.

Where torchvision does not import (it has no CPU build for this torch), every case skips with
the import error. The models take a Python list of images, so each lowering has a static batch:
each batch size is its own lowering. Every check runs on fresh images, not the capture's example,
and compares detection by detection (paired by label and IoU) and in eager's order.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

import fxdeploy
from examples import zoo_torchvision as tv
from tests.helpers import require_target
from tests.zoo.checks import check_detections
from tests.zoo.known_failures import TORCHVISION_FAILURES

AVAILABLE, WHY = tv.available()
pytestmark = [pytest.mark.zoo] + ([] if AVAILABLE else [pytest.mark.skip(reason=WHY)])
TARGETS = list(fxdeploy.targets())
TOLERANCE = {"ncnn": 1e-3}
"""Max score difference of paired detections; 1e-4 elsewhere."""
BATCHES = (1, 2)


def _cases() -> Iterator[Any]:
    for name in tv.ZOO:
        for target in TARGETS:
            for batch in BATCHES:
                marks = []
                if (name, target, batch) in TORCHVISION_FAILURES:
                    reason, raises = TORCHVISION_FAILURES[name, target, batch]
                    marks.append(pytest.mark.xfail(reason=reason, raises=raises, strict=True))
                yield pytest.param(name, target, batch, marks=marks, id=f"{name}-{target}-batch{batch}")


@pytest.fixture(scope="module")
def model_of() -> Iterator[Any]:
    """name -> (model, example); one model held at a time (the cases run model by model)."""
    held: dict[str, tuple[torch.nn.Module, torch.Tensor]] = {}

    def get(name: str) -> tuple[torch.nn.Module, torch.Tensor]:
        if name not in held:
            held.clear()
            model, (example,) = tv.ZOO[name]()
            held[name] = model, example
        return held[name]

    yield get
    held.clear()


def assert_untouched(model: torch.nn.Module, name: str) -> None:
    """The substitutions were scoped to the capture: classes, instances and torchvision's
    module-level pooling function are as before."""
    from torchvision.ops import poolers

    for target in tv.substitutions(name):
        if "." not in target.__qualname__:
            assert getattr(poolers, target.__name__) is target
            continue
        for module in model.modules():
            assert target.__name__ not in vars(module), f"{target.__qualname__} outlived lower()"
            owner = type(module).__dict__.get(target.__name__)
            assert owner is None or owner is target


@pytest.mark.parametrize(("name", "target", "batch"), list(_cases()))
def test_torchvision_detector_matches_eager(model_of, name: str, target: str, batch: int) -> None:
    require_target(target)
    model, example = model_of(name)
    size = tuple(example.shape[1:])
    deployed = fxdeploy.lower(
        model, (example[:1].expand(batch, *size).contiguous(),), target=target,
        dynamic_shapes={"images": {}}, substitutions=tv.substitutions(name),
    )
    assert_untouched(model, name)
    matched = 0
    for seed in (11, 12):
        images = torch.rand(batch, *size, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            want = model(images)
        matched += check_detections(want, deployed(images), TOLERANCE.get(target, 1e-4))
    assert matched > 0, "the check is vacuous without detections"


class _TopDetections(torch.nn.Module):
    """Eager code as users write it: torchvision's batched_nms, its first 5 kept, gathered."""

    def forward(self, boxes: torch.Tensor, scores: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        from torchvision.ops import batched_nms

        keep = batched_nms(boxes, scores, labels, 0.5)[:5]
        return boxes[keep], scores[keep], labels[keep]


def test_torchvision_batched_nms_goes_through_the_builtin_substitution() -> None:
    """No substitution is passed: fxdeploy's built-in one traces torchvision's batched_nms as its
    own op, which the substitute_nms pass rewrites into multiclass_nms; ONNX Runtime then returns
    eager torchvision's detections."""
    generator = torch.Generator().manual_seed(0)
    corners = torch.rand(40, 2, generator=generator) * 50
    boxes = torch.cat([corners, corners + 5 + torch.rand(40, 2, generator=generator) * 20], dim=1)
    scores = torch.rand(40, generator=generator)
    labels = torch.randint(0, 3, (40,), generator=generator)
    model = _TopDetections().eval()
    deployed = fxdeploy.lower(model, (boxes, scores, labels), target="onnxruntime")
    assert any("batched_nms" in name for name in deployed.manifest["info"]["substitutions"])
    for seed in (1, 2):
        g = torch.Generator().manual_seed(seed)
        shuffled = scores[torch.randperm(40, generator=g)]
        want, got = model(boxes, shuffled, labels), deployed(boxes, shuffled, labels)
        assert [len(t) for t in got] == [len(t) for t in want] == [5, 5, 5]
        for w, h in zip(want, got, strict=True):
            torch.testing.assert_close(h, w)
