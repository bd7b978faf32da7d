"""``torch.roll`` on the ONNX targets (``fxdeploy/lowering/onnx_translations/roll.py``): a shift read
from a dynamic size (``fftshift``, half an image's width) failed to export ("Unsupported attribute
type"); constant shifts, negative ones, ones past the size and a roll without ``dims`` keep torch's
values."""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from tests.helpers import require_target

SIZES = [(1, 3, 48, 40), (2, 3, 17, 33), (1, 3, 1, 96), (3, 3, 95, 2)]


class BySize(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h, w = x.shape[-2:]
        return (torch.roll(x, w // 2, -1), torch.fft.fftshift(x, dim=(-2, -1)), torch.fft.ifftshift(x, dim=-2),
                torch.roll(x, (-(h // 3), w + 1), (2, 3)))


class Constant(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.roll(x, 5), torch.roll(x, -7, 0), torch.roll(x, (1, -2, 100), (1, -1, 2))


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_a_roll_by_a_size_is_torchs_at_every_size(target: str) -> None:
    require_target(target)
    model = BySize()
    shapes = {"x": {0: ("b", 1, 4), 2: ("h", 1, 96), 3: ("w", 2, 96)}}
    deployed = fxdeploy.lower(model, (torch.randn(1, 3, 48, 40),), target=target, dynamic_shapes=shapes)
    for size in SIZES:
        x = torch.randn(size)
        for index, (got, want) in enumerate(zip(deployed(x), model(x), strict=True)):
            assert torch.equal(got, want), f"output {index} at {size}"


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_constant_rolls_keep_torchs_values(target: str) -> None:
    require_target(target)
    model = Constant()
    shapes = {"x": {2: ("h", 1, 96)}}
    deployed = fxdeploy.lower(model, (torch.randn(2, 3, 8, 5),), target=target, dynamic_shapes=shapes)
    for size in [(2, 3, 8, 5), (2, 3, 1, 5), (2, 3, 61, 5)]:
        x = torch.randn(size)
        for index, (got, want) in enumerate(zip(deployed(x), model(x), strict=True)):
            assert torch.equal(got, want), f"output {index} at {size}"
