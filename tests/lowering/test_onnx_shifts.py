"""Shifts of unsigned integers (``fxdeploy/lowering/onnx_translations/shifts.py``): torch.onnx's own
translation cast their results to the signed type, and OpenVINO saturates a narrow left shift."""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from tests.helpers import require_target


class UnpackBits(torch.nn.Module):
    """Bit masks packed in bytes, as masks are stored and sent: unpacked, re-packed, shifted."""

    def forward(self, packed: torch.Tensor) -> tuple[torch.Tensor, ...]:
        bits = (packed.unsqueeze(-1) >> torch.arange(8, dtype=torch.uint8)) & 1  # by a uint8 tensor
        doubled = packed << 1  # wraps past 255, as torch does
        return bits, doubled, (packed >> 2) | 1, torch.bitwise_left_shift(packed, 3)


class SignedShifts(torch.nn.Module):
    def forward(self, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a >> 1, a << 2  # arithmetic: -7 >> 1 is -4


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_unsigned_shifts_wrap_and_stay_unsigned(target: str) -> None:
    require_target(target)
    packed = torch.tensor([[0, 1, 100, 200, 255, 56, 128, 3], [7, 9, 250, 129, 64, 32, 16, 8]], dtype=torch.uint8)
    model = UnpackBits()
    deployed = fxdeploy.lower(model, (packed,), target=target, dynamic_shapes={"packed": {0: ("batch", 1, 4)}})
    x = torch.randint(0, 256, (3, 8), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    for got, want in zip(deployed(x), model(x), strict=True):
        assert got.dtype == torch.uint8 and torch.equal(got, want)


def test_signed_shifts_keep_torchs_arithmetic_shift() -> None:
    require_target("onnxruntime")
    a = torch.tensor([[7, -7, 0, 5, -5, 9, -1, -2]])
    got, want = fxdeploy.lower(SignedShifts(), (a,), target="onnxruntime")(a), SignedShifts()(a)
    assert all(g.dtype == torch.int64 and torch.equal(g, w) for g, w in zip(got, want, strict=True))
