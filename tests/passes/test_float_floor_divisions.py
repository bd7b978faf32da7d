"""float_floor_divisions: OpenVINO has no exact fmod, so a float ``//``, ``%`` or fmod came out as the
floor of the rounded quotient (``-7.0 // 0.7`` gave -10, torch -11), silently where lower()'s example
held no exact multiple of the divisor. Refused naming the line, unless the divisor is a power of two,
whose quotient is exact: those keep torch's values, an infinite dividend's NaN included."""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from fxdeploy.errors import PassError
from fxdeploy.passes.float_floor_divisions import check
from tests.helpers import require_target

SPECIAL = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 0.3, -0.3, 7.0, -7.0, 3.75,
           -6.3, 1e30, -1e30, 0.7, -0.7, 1.5, -1.5, 4.0, -4.0, 123.456, -0.125]


class ByADecimal(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * 2, x // 0.7


class ByATensor(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.remainder(x, y)


class ByPowersOfTwo(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (x // 2, x % 0.5, torch.floor_divide(x, -4.0), torch.div(x, 0.25, rounding_mode="floor"),
                torch.remainder(x, -8), torch.fmod(x, 2.0), torch.div(x, 3.0, rounding_mode="trunc"), x / 0.7)


def _graph(model: torch.nn.Module, *args: torch.Tensor) -> torch.fx.Graph:
    return torch.export.export(model, args).run_decompositions({}).graph


def test_check_says_why_a_division_stays() -> None:
    reasons = [check(n) for n in _graph(ByPowersOfTwo(), torch.randn(4)).nodes if n.op == "call_function"]
    assert all(reasons) and sum("power of two" in reason for reason in reasons) == 6, reasons
    floor = [n for n in _graph(ByADecimal(), torch.randn(4)).nodes if n.op == "call_function"]
    assert [check(n) is None for n in floor] == [False, True]
    ints = [n for n in _graph(ByATensor(), torch.arange(4), torch.arange(1, 5)).nodes if n.op == "call_function"]
    assert ints and all("integer" in check(n) for n in ints)
    promoted = [n for n in _graph(ByADecimal(), torch.arange(4)).nodes if "div" in str(n.target)]
    assert [check(n) for n in promoted] == [None]  # an integer // 0.7 is a float division


@pytest.mark.parametrize(("model", "example"), [(ByADecimal(), (torch.randn(1, 8),)),
                                                (ByATensor(), (torch.randn(1, 8), torch.rand(1, 8) + 1))])
def test_openvino_refuses_a_float_floor_division_naming_the_line(model: torch.nn.Module, example: tuple) -> None:
    require_target("openvino")
    with pytest.raises(PassError, match=r"test_float_floor_divisions\.py.*OpenVINO has no exact fmod"):
        fxdeploy.lower(model, example, target="openvino")


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_floor_division_by_a_power_of_two_is_torchs(target: str) -> None:
    require_target(target)
    model = ByPowersOfTwo()
    deployed = fxdeploy.lower(model, (torch.randn(1, 8) * 9,), target=target, dynamic_shapes={"x": {1: ("n", 1, 64)}})
    x = torch.tensor([SPECIAL])
    for index, (got, want) in enumerate(zip(deployed(x), model(x), strict=True)):
        tolerance = 1e-6 if index >= 6 else 0  # a true (and truncated) division: OpenVINO's reciprocal
        torch.testing.assert_close(got, want, rtol=tolerance, atol=0, equal_nan=True, msg=f"output {index}")
