"""On ncnn, which runs one image at a time, a model whose output for one image reads the others
(``x[0]`` broadcast to the batch) fails lower()'s check; the refusal says so, where it said only
"differs from eager"."""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from fxdeploy.errors import LoweringError
from fxdeploy.parity.coupled_images import coupling
from tests.helpers import require_target


class FirstImage(torch.nn.Module):
    """Every image shifted by the first image's mean: a batch norm of sorts, written by hand."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - x[0].mean()


class PerImage(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - x.mean((1, 2, 3), keepdim=True)


def test_a_model_that_reads_across_its_batch_is_refused_on_ncnn_saying_why() -> None:
    require_target("ncnn")
    with pytest.raises(LoweringError) as caught:
        fxdeploy.lower(FirstImage().eval(), (torch.rand(2, 3, 8, 8),), target="ncnn",
                       dynamic_shapes={"x": {0: ("batch", 1, 4)}})
    message = str(caught.value)
    assert "differs from eager" in message and "reads the other images" in message, message
    assert "ncnn runs one image at a time" in message and "onnxruntime" in message


def test_the_coupling_is_told_from_eager_alone() -> None:
    x = torch.rand(3, 3, 8, 8)

    def run(model: torch.nn.Module) -> object:
        return lambda inputs: model(*inputs)

    assert coupling([x], FirstImage()(x), run(FirstImage()), 1e-5) is not None
    assert coupling([x], PerImage()(x), run(PerImage()), 1e-5) is None
    assert coupling([x[:1]], FirstImage()(x[:1]), run(FirstImage()), 1e-5) is None  # one image couples nothing


def test_a_model_that_cannot_run_one_image_alone_leaves_the_checks_words() -> None:
    class Pairs(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.view(x.shape[0] // 2, 2, -1).flip(1).reshape(x.shape)

    x = torch.rand(4, 3)
    assert coupling([x], Pairs()(x), lambda inputs: Pairs()(*inputs), 1e-5) is None
