"""A batch of one (or a sequence of one token) declared dynamic: capture widens it to 2, so that
torch.export does not fix the dim, and the artifact still takes size 1 and every other size."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch
from torch import nn

import fxdeploy
from examples import models
from fxdeploy.artifact.dims import to_export_dynamic_shapes
from fxdeploy.capture.widen import widen
from fxdeploy.cli.report import render_report
from tests.helpers import require_target

TARGETS = ["onnxruntime", "openvino", "torchscript", "ncnn", "tensorrt"]


class Tokens(nn.Module):
    """BERT-like inputs: ids and a mask that share a dynamic length."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 8)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return (self.embed(ids) * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)


def test_widen_repeats_every_input_along_the_named_dims() -> None:
    model = Tokens()
    ids, mask = torch.tensor([[7]]), torch.ones(1, 1)
    dynamic = {"ids": {0: "batch", 1: "length"}, "mask": {0: "batch", 1: "length"}}
    shapes, _ = to_export_dynamic_shapes(dynamic, model.forward, (ids, mask), {})
    args, kwargs, names = widen((ids, mask), {}, shapes, model.forward)
    assert names == ["batch", "length"] and kwargs == {}
    assert args[0].tolist() == [[7, 7], [7, 7]] and args[1].shape == (2, 2)


def test_static_and_larger_dims_are_left_alone() -> None:
    model = Tokens()
    ids, mask = torch.tensor([[7, 8, 9]]), torch.ones(1, 3)
    shapes, _ = to_export_dynamic_shapes({"ids": {1: "length"}, "mask": {1: "length"}}, model.forward, (ids, mask), {})
    assert widen((ids, mask), {}, shapes, model.forward) == ((ids, mask), {}, [])


@pytest.mark.parametrize("target", TARGETS)
def test_a_batch_of_one_lowers_with_a_dynamic_batch(target: str, caplog: pytest.LogCaptureFixture) -> None:
    require_target(target)
    model, (x,) = models.convnet()
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        deployed = fxdeploy.lower(model, (x[:1],), target=target, dynamic_shapes={"x": {0: "batch"}})
    asked = [str(w.message) for w in caught] + [r.getMessage() for r in caplog.records]
    assert not [m for m in asked if "batch" in m or "size" in m], asked
    assert deployed.manifest["info"]["widened_dims"] == ["batch"]
    assert "repeated to size 2 along batch" in render_report(deployed)
    for batch in (1, 3):
        images = torch.randn(batch, 3, 64, 64, generator=torch.Generator().manual_seed(batch))
        with torch.no_grad():
            want = model(images)
        torch.testing.assert_close(deployed(images), want, rtol=1e-4, atol=1e-4)


def test_a_length_of_one_lowers_with_a_dynamic_length() -> None:
    model = Tokens().eval()
    dynamic = {"ids": {0: "batch", 1: "length"}, "mask": {0: "batch", 1: "length"}}
    deployed = fxdeploy.lower(model, (torch.tensor([[7]]), torch.ones(1, 1)), dynamic_shapes=dynamic)
    assert deployed.manifest["info"]["widened_dims"] == ["batch", "length"]
    for batch, length in ((1, 1), (3, 5)):
        ids = torch.randint(0, 50, (batch, length), generator=torch.Generator().manual_seed(length))
        mask = (torch.rand(batch, length, generator=torch.Generator().manual_seed(9)) > 0.3).float()
        with torch.no_grad():
            want = model(ids, mask)
        torch.testing.assert_close(deployed(ids, mask), want, rtol=1e-4, atol=1e-4)
