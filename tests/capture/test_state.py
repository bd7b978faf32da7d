"""A model's state across lower(): buffers keep the user's values, a forward that carries state
from one call to the next is refused naming its buffers, and modules left in training mode are
named (fxdeploy.capture.state)."""

from __future__ import annotations

import warnings

import pytest
import torch

import fxdeploy
from fxdeploy.errors import CaptureError, TrainingModeWarning
from tests.helpers import max_abs_error


class Counter(torch.nn.Module):
    """A call counter: each call scales by how often it was called."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.linear(x) * self.calls


class RunningMean(torch.nn.Module):
    """A running mean updated in eval mode, as a streaming normalizer does."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.mean.mul_(0.9).add_(0.1 * x.mean(0))
        return x - self.mean


class ShapeCache(torch.nn.Module):
    """A buffer used as a cache: written in forward with a value that depends on the input's shape
    only, so every call returns the same for the same input."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("ramp", torch.zeros(4), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.ramp.copy_(torch.arange(4.0) / x.shape[-1])
        return x * self.ramp


def _values(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: buffer.clone() for name, buffer in model.named_buffers()}


@pytest.mark.parametrize("cls", [Counter, RunningMean], ids=["counter", "running_mean"])
@pytest.mark.parametrize("target", ["onnxruntime", "torchscript"])
def test_a_forward_that_carries_state_is_refused_naming_its_buffer(cls: type, target: str) -> None:
    model = cls().eval()
    x = torch.randn(3, 4)
    before = _values(model)
    with pytest.raises(CaptureError) as info:
        fxdeploy.lower(model, (x,), target=target)
    message = str(info.value)
    name = next(iter(before))
    assert f"writes its buffer(s) {name}" in message, message
    assert "a second call on the example returns other values" in message, message
    assert "pass it in as an input" in message, message
    for key, value in _values(model).items():  # the refusal left the state as the user gave it
        assert torch.equal(value, before[key]), key


@pytest.mark.parametrize("target", ["onnxruntime", "torchscript"])
def test_a_buffer_written_as_a_cache_lowers_and_the_model_keeps_its_values(target: str) -> None:
    model = ShapeCache().eval()
    x = torch.randn(3, 4)
    deployed = fxdeploy.lower(model, (x,), target=target)
    assert torch.equal(model.ramp, torch.zeros(4)), "lower() left the model's buffer as its forward wrote it"
    want = model(x)
    assert max_abs_error(deployed(x), want) == 0.0


def test_lower_leaves_the_model_giving_what_it_gave_before() -> None:
    """lower() runs the model several times (capture, its check); a model whose forward reads what
    it wrote (a counter) must read the user's state after lower() as before it, refused or not."""
    model = Counter().eval()
    x = torch.randn(3, 4)
    with pytest.raises(CaptureError):
        fxdeploy.lower(model, (x,), target="onnxruntime")
    assert model.calls.item() == 0.0
    first = model(x)
    assert torch.equal(first, model.linear(x)), "the first call after lower() must be the model's first call"


class WithNorm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.norm = torch.nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.linear(x))


def test_modules_left_in_training_mode_are_named_and_the_artifact_computes_as_eval() -> None:
    model = WithNorm()
    model.linear.eval()  # the norm alone stays in training mode, as after a partial .eval()
    model.training = False
    x = torch.randn(5, 4)
    with pytest.warns(TrainingModeWarning, match=r"1 module\(s\) of WithNorm are in training mode \('norm'\)"):
        deployed = fxdeploy.lower(model, (x,), target="onnxruntime")
    assert model.norm.training and not model.linear.training, "lower() gives the modules their modes back"
    model.eval()
    assert max_abs_error(deployed(x), model(x)) < 1e-5


def test_an_eval_model_lowers_without_a_training_warning() -> None:
    model = WithNorm().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrainingModeWarning)
        fxdeploy.lower(model, (torch.randn(5, 4),), target="onnxruntime")


class Reassigning(torch.nn.Module):
    """A counter kept by putting a new tensor in the buffer's place, not by writing into it."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls = self.calls + 1
        return x * self.calls


def test_a_buffer_replaced_in_forward_is_state_too_and_given_back() -> None:
    model = Reassigning().eval()
    original = model.calls
    with pytest.raises(CaptureError, match=r"writes its buffer\(s\) calls"):
        fxdeploy.lower(model, (torch.randn(3, 4),), target="onnxruntime")
    assert model.calls is original and model.calls.item() == 0.0
