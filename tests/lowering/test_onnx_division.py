"""Floor division and remainder (``fxdeploy/lowering/onnx_translations/division.py``): torch's
values, where torch.onnx wrote ``Floor(Div(a, b))`` (``-7.0 // 0.7`` was -10, torch's -11) and
refused a divisor read from a dynamic shape (``i % i.shape[1]``), and a size's ``//`` (ONNX's integer
Div truncates: ``-(-h // 4)`` was ``h // 4``)."""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from tests.helpers import require_target, special_pairs

SPECIAL = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 0.3, -0.3, 1e-30]
MULTIPLES = torch.tensor([[-7.0, -6.3, -0.7, 0.7, 1.4, -1.4, 3.5, -3.5, 2.1, -4.9, 6.3, 0.0, 7.0, -2.8, 5.6, -5.6]])


class Divisions(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        i = (x.nan_to_num(0, 0, 0) * 7).clamp(-99, 99).long()
        j = torch.where((y * 5).long() == 0, 3, (y.nan_to_num(1, 1, 1) * 5).clamp(-9, 9).long())
        return (x // y, x % y, torch.div(x, y, rounding_mode="trunc"), torch.div(x, y, rounding_mode="floor"),
                torch.floor_divide(x, 0.7), torch.remainder(x, -0.7), i // j, i % j,
                torch.div(i, j, rounding_mode="trunc"), i % i.shape[1], i // -3, torch.remainder(i, 4))


class ByADecimal(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.floor_divide(x, 0.7), torch.remainder(x, 0.7)


def lower(model: torch.nn.Module, target: str, *args: torch.Tensor) -> fxdeploy.Deployed:
    require_target(target)
    shapes = {name: {1: ("n", 2, 256)} for name in ("x", "y")[:len(args)]}
    return fxdeploy.lower(model, args, target=target, dynamic_shapes=shapes)


def assert_exact(deployed: fxdeploy.Deployed, model: torch.nn.Module, *args: torch.Tensor) -> None:
    for index, (got, want) in enumerate(zip(deployed(*args), model(*args), strict=True)):
        assert got.dtype == want.dtype, f"output {index}"
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True, msg=f"output {index}")


def test_floor_division_and_remainder_are_torchs_at_special_values() -> None:
    model = Divisions()
    deployed = lower(model, "onnxruntime", torch.randn(1, 8), torch.randn(1, 8))
    a, b = special_pairs(SPECIAL)
    assert_exact(deployed, model, a.reshape(1, -1), b.reshape(1, -1))


class IntegerDivisions(Divisions):
    """``Divisions``' integer outputs: OpenVINO refuses a float ``//`` by other than a power of two
    (``fxdeploy/passes/float_floor_divisions.py``)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return super().forward(x, y)[6:]


def test_integer_division_on_openvino_is_torchs() -> None:
    """OpenVINO's integers are exact (``exact_integers.py``)."""
    model = IntegerDivisions()
    deployed = lower(model, "openvino", torch.randn(1, 8), torch.randn(1, 8))
    a, b = special_pairs(SPECIAL)
    a, b = a.reshape(1, -1), b.reshape(1, -1)
    got, want = deployed(a, b), model(a, b)
    for index in range(len(want)):
        assert torch.equal(got[index], want[index]), f"output {index}"


def test_floor_division_at_exact_multiples_of_a_decimal_is_torchs() -> None:
    """OpenVINO refuses this model (``tests/passes/test_float_floor_divisions.py``): it has no exact fmod."""
    model = ByADecimal()
    deployed = lower(model, "onnxruntime", torch.randn(1, 8) * 5)
    assert_exact(deployed, model, MULTIPLES)
    assert model(MULTIPLES)[0][0, 0] == -11  # the floor of the exact quotient -10.00000017


class CeilingRows(torch.nn.Module):
    """The last ceil(h / 4) rows, and as many as the ceiling of h over a size read elsewhere."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x.shape[2]
        return x[:, :, -(-h // 4):] * 2, x[:, :, : -(-h // y.shape[0])] * 2


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_the_ceiling_of_a_dynamic_height_is_eagers(target: str) -> None:
    """lower()'s check runs the example, min, opt and max heights, every one a multiple of 4 and of
    the divisor read from ``y``: the artifact sliced one row more than eager at 65, 97 or 255."""
    require_target(target)
    model = CeilingRows()
    shapes = {"x": {2: ("h", 64, 256)}, "y": {0: ("n", 2, 8)}}
    deployed = fxdeploy.lower(model, (torch.randn(1, 1, 128, 8), torch.zeros(4)), target=target, dynamic_shapes=shapes)
    for h, n in ((65, 4), (97, 3), (255, 8), (131, 2)):
        x, y = torch.randn(1, 1, h, 8), torch.zeros(n)
        assert_exact(deployed, model, x, y)
