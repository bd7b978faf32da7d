"""Bad inputs to a Deployed raise InputError naming the input, the expected and the actual value."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import fxdeploy
from examples import models


@pytest.fixture(scope="module")
def deployed():
    model, (x,) = models.convnet()
    return fxdeploy.lower(model, (x,), dynamic_shapes={"x": {0: ("batch", 1, 4)}})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), r"expected 1 input\(s\) \(x\), got 0"),
        ((torch.randn(1, 3, 64, 64), torch.randn(1)), r"expected 1 input\(s\) \(x\), got 2"),
        ((torch.randn(1, 3, 64, 64, dtype=torch.float64),), r"input 'x': expected dtype float32, got float64"),
        ((torch.randn(3, 64, 64),), r"input 'x': expected rank 4 \(shape \[batch, 3, 64, 64\]\), got rank 3"),
        ((torch.randn(5, 3, 64, 64),), r"input 'x': dim 0 \(batch\) must be in \[1, 4\], got 5"),
        ((torch.randn(0, 3, 64, 64),), r"input 'x': dim 0 \(batch\) must be in \[1, 4\], got 0"),
        ((torch.randn(1, 3, 32, 64),), r"input 'x': dim 2 must be 64 .* got 32"),
        (("not a tensor",), r"input 'x': expected a tensor, got str"),
    ],
)
def test_bad_input_is_named(deployed, args, message: str) -> None:
    before = deployed.stats.count
    with pytest.raises(fxdeploy.InputError, match=message):
        deployed(*args)
    assert deployed.stats.count == before  # the engine never saw it


def test_execute_names_missing_and_unknown(deployed) -> None:
    with pytest.raises(fxdeploy.InputError, match=re.escape("missing ['x'], unknown ['y']")):
        deployed.execute({"y": torch.randn(1, 3, 64, 64)})


def test_numpy_and_non_contiguous_inputs_give_correct_results(deployed) -> None:
    model, _ = models.convnet()
    x = torch.randn(2, 64, 64, 3).permute(0, 3, 1, 2)  # non-contiguous view
    want = model(x)
    assert (deployed(x) - want).abs().max().item() <= 1e-4
    assert (deployed(x.contiguous().numpy()) - want).abs().max().item() <= 1e-4
    assert isinstance(x.contiguous().numpy(), np.ndarray)


class TwoInputs(torch.nn.Module):
    def forward(self, image: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return image.mean((1, 2, 3)) * scale - scale.square()


@pytest.fixture(scope="module")
def two_inputs():
    image, scale = torch.randn(2, 3, 8, 8), torch.tensor([2.0, -1.0])
    return fxdeploy.lower(TwoInputs(), (image, scale)), image, scale


def test_keyword_inputs_bind_by_name_in_any_order(two_inputs) -> None:
    deployed, image, scale = two_inputs
    want = TwoInputs()(image, scale)
    for got in (deployed(image, scale), deployed(image, scale=scale), deployed(scale=scale, image=image),
                deployed(image=image, scale=scale)):
        assert (got - want).abs().max() <= 1e-6


def test_unknown_keyword_input_is_named(two_inputs) -> None:
    deployed, image, scale = two_inputs
    with pytest.raises(fxdeploy.InputError, match=r"keyword inputs \['factor'\] do not match .* expects \['scale'\]"):
        deployed(image, factor=scale)


def test_checks_still_run_after_a_good_call_with_the_same_shape(deployed) -> None:
    """A repeated shape skips only the dim arithmetic: every per-call fact is still checked."""
    model, _ = models.convnet()
    good = torch.randn(2, 3, 64, 64)
    deployed(good)
    assert deployed._signature.accepted == (good.shape,)
    with pytest.raises(fxdeploy.InputError, match="expected dtype float32, got float64"):
        deployed(good.double())
    with pytest.raises(fxdeploy.InputError, match="expected a dense tensor with data, got a meta tensor"):
        deployed(good.to("meta"))
    with pytest.raises(fxdeploy.InputError, match=r"dim 0 \(batch\) must be in \[1, 4\], got 5"):
        deployed(torch.randn(5, 3, 64, 64))
    # converted, not refused: a non-contiguous view, a tensor that requires grad, a numpy array
    view = torch.randn(2, 64, 64, 3).permute(0, 3, 1, 2)
    for value in (view, good.clone().requires_grad_(), good.numpy()):
        want = model(torch.as_tensor(value).detach())
        assert (deployed(value) - want).abs().max().item() <= 1e-4
