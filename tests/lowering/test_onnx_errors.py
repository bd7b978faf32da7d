"""A torch.onnx failure says what failed, where in the user's code, and what to do: the root cause,
not the exporter's banner ("create an issue in the PyTorch repository") or its colour codes."""

from __future__ import annotations

import pytest
import torch

import fxdeploy


@torch.library.custom_op("fxdeploy_test::doubled", mutates_args=())
def doubled(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@doubled.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class UsesACustomOp(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return doubled(x.relu()) + 1  # THE LINE


def test_an_op_without_translation_names_the_op_the_line_and_the_fix() -> None:
    with pytest.raises(fxdeploy.LoweringError) as info:
        fxdeploy.lower(UsesACustomOp(), (torch.randn(2, 3),), target="onnxruntime")
    message = str(info.value)
    line = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if text.endswith("# THE LINE"))
    assert f'{__file__}", line {line}' in message
    assert "fxdeploy_test.doubled" in message and "No ONNX function found" in message
    assert "onnx_translations" in message and "@fxdeploy.substitute" in message
    assert "\x1b[" not in message and "Create an issue" not in message and "step 3/3" not in message
    assert "pass rewrites" not in message  # no pass rewrites this op


class MedianWithIndex(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        m = x.median(1)
        return m.values, m.indices


class RunningMaxOverTheBatch(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.cummax(0).values


@pytest.mark.parametrize(("model", "shapes", "pass_name", "reason"), [
    (MedianWithIndex(), None, "order_statistics", "its indices are read: torch's index among equal values"),
    (RunningMaxOverTheBatch(), {"x": {0: ("batch", 2, 8)}}, "running_extrema", "the running dim is dynamic"),
])
def test_an_op_a_pass_left_says_why(model: torch.nn.Module, shapes: object, pass_name: str, reason: str) -> None:
    """torch.onnx has no median with indices or a running max: the pass that rewrites them where that
    gives torch's values says why it left this one (what the user can change), not only "No ONNX function"."""
    with pytest.raises(fxdeploy.LoweringError) as info:
        fxdeploy.lower(model, (torch.randn(4, 9),), target="onnxruntime", dynamic_shapes=shapes)
    message = str(info.value)
    assert f"fxdeploy's {pass_name} pass rewrites" in message and reason in message, message
    assert "No ONNX function found" in message and "@fxdeploy.substitute" in message
