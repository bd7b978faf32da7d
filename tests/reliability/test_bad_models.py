"""Models fxdeploy cannot deploy must fail at lower time, naming the line, op or substitution.

Where fxdeploy does not do this yet, the test states the wanted behaviour and carries a strict
xfail naming the function to change; it fails (XPASS) the day the gap is closed.
"""

from __future__ import annotations

import inspect
import re

import pytest
import torch

import fxdeploy
from tests.helpers import require_target
from tests.reliability.conftest import TARGETS, require


class DataDependentBranch(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # BREAKS: Python control flow on a tensor's value
            return x * 2
        return x


def _halve_until_small(x: torch.Tensor) -> torch.Tensor:
    while x.abs().max() > 1:  # BREAKS: the loop count depends on the data
        x = x / 2
    return x


class HelperBreaks(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _halve_until_small(x + 1) * 2


def _line_of(function, marker: str = "# BREAKS") -> int:
    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(lines) if marker in line)


@pytest.mark.parametrize(
    ("model", "function", "name"),
    [
        (DataDependentBranch(), DataDependentBranch.forward, "forward"),
        (HelperBreaks(), _halve_until_small, "_halve_until_small"),
    ],
    ids=["branch_in_forward", "loop_in_helper"],
)
def test_capture_error_names_the_users_file_and_line(model: torch.nn.Module, function, name: str) -> None:
    with pytest.raises(fxdeploy.CaptureError) as info:
        fxdeploy.lower(model, (torch.randn(4, 3),))
    message = str(info.value)
    assert f"tracing broke in {name}() at {__file__}:{_line_of(function)}" in message
    assert "# BREAKS" in message  # the offending source line is quoted


@torch.library.custom_op("fxdeploy_reliability::triple", mutates_args=())
def triple(x: torch.Tensor) -> torch.Tensor:
    """A real custom op with no ONNX translation and no pnnx converter."""
    return x * 3


@triple.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class UsesCustomOp(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.fxdeploy_reliability.triple(x) + 1


OP = re.compile(r"fxdeploy_reliability(\.|::)triple")


@pytest.fixture(scope="module")
def custom_op_outcome():
    cache: dict[str, fxdeploy.Deployed | fxdeploy.LoweringError] = {}

    def get(target: str) -> fxdeploy.Deployed | fxdeploy.LoweringError:
        require(target)
        if target not in cache:
            try:
                cache[target] = fxdeploy.lower(UsesCustomOp(), (torch.randn(2, 4),), target=target)
            except fxdeploy.LoweringError as exc:
                cache[target] = exc
        return cache[target]

    return get


@pytest.mark.parametrize("target", TARGETS)
def test_custom_op_is_lowered_or_named(custom_op_outcome, target: str) -> None:
    """TorchScript can call a registered custom op; every other target must name it."""
    outcome = custom_op_outcome(target)
    if isinstance(outcome, fxdeploy.LoweringError):
        assert OP.search(str(outcome)), str(outcome)
    else:
        x = torch.randn(2, 4)
        assert torch.equal(outcome(x), UsesCustomOp()(x))
        assert target == "torchscript", f"{target} lowered an op it has no translation for"


@pytest.mark.parametrize("target", TARGETS)
def test_custom_op_error_names_target_op_and_fix(custom_op_outcome, target: str) -> None:
    outcome = custom_op_outcome(target)
    if not isinstance(outcome, fxdeploy.LoweringError):
        pytest.skip(f"{target} lowers the custom op, so there is no error to read")
    message = str(outcome)
    assert target in message, message
    assert OP.search(message), message
    assert "@fxdeploy.substitute" in message, message


class LoopInForward(torch.nn.Module):
    """A greedy loop over a shrinking selection, in forward itself."""

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        order = scores.argsort(descending=True)
        keep = []
        while order.numel() > 0:
            keep.append(order[0])
            order = order[1:][scores[order[1:]] < scores[order[0]] - 0.1]  # BREAKS
        return torch.stack(keep)


def test_the_substitution_to_write_names_the_method_with_its_class() -> None:
    """The frame came from dynamo's text, which names the function only: it read
    ``@fxdeploy.substitute(forward)``, which names nothing; the class is read from the source."""
    with pytest.raises(fxdeploy.CaptureError) as info:
        fxdeploy.lower(LoopInForward(), (torch.rand(20),), target="torchscript")
    assert f"@fxdeploy.substitute({__name__}.LoopInForward.forward)" in str(info.value), str(info.value)


class Conditional(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda t: t * 2, lambda t: t - 1, (x,))


@pytest.mark.parametrize("target", ["torchscript", "ncnn"])
def test_torch_cond_is_refused_by_name_where_torchscript_carries_the_graph(target: str) -> None:
    """TorchScript cannot script a higher-order op: its error was "attribute lookup is not defined
    on builtin"; ncnn's (pnnx reads TorchScript) blamed a batch fixed at 2."""
    require_target(target)
    says = r"cond \(node .cond., File .*test_bad_models\.py.*no TorchScript form"
    with pytest.raises(fxdeploy.LoweringError, match=says):
        fxdeploy.lower(Conditional(), (torch.randn(2, 3),), target=target)
