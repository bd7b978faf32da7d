"""``atan2`` and a real ``angle`` (``fxdeploy/lowering/onnx_translations/atan2.py``): torch.onnx's translation gave -pi
for ``atan2(+0, -1)`` (torch: pi), 0 for ``atan2(+0, -0)`` and every NaN; lower()'s check, on random inputs, never
met a zero. Exact against eager at every signed zero, infinity and NaN, before and after save/load."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

import fxdeploy
from tests.helpers import require_target

SPECIAL = (0.0, -0.0, 1.0, -1.0, 2.5, -2.5, float("inf"), float("-inf"), float("nan"))


class Direction(torch.nn.Module):
    """A box's direction (its height over its width), and the angle of a signed value."""

    def forward(self, y: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.atan2(y, x), torch.angle(x)


def _grid() -> tuple[torch.Tensor, torch.Tensor]:
    pairs = list(itertools.product(SPECIAL, SPECIAL))
    return torch.tensor([y for y, _ in pairs]), torch.tensor([x for _, x in pairs])


def _assert_identical(got: torch.Tensor, want: torch.Tensor, edge: torch.Tensor) -> None:
    """NaN where eager's is, the same sign bit elsewhere; equal values where ``edge`` (an input is zero, infinite or
    NaN), a few float32 steps elsewhere (torch's vectorized atan2 is itself a step off: 0.78539813 for ``(1, 1)``)."""
    assert got.dtype == want.dtype
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got.signbit() & ~got.isnan(), want.signbit() & ~want.isnan())
    assert torch.equal(got[edge].nan_to_num(), want[edge].nan_to_num())
    assert torch.allclose(got.double(), want.double(), rtol=3e-7, atol=0, equal_nan=True)


def _edges(*inputs: torch.Tensor) -> torch.Tensor:
    return torch.stack([(v == 0) | ~v.isfinite() for v in inputs]).any(0)


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_signed_zeros_infinities_and_nans_match_eager(target: str, tmp_path: Path) -> None:
    require_target(target)
    generator = torch.Generator().manual_seed(0)
    example = (torch.randn(16, generator=generator), torch.randn(16, generator=generator))
    deployed = fxdeploy.lower(Direction(), example, target=target, dynamic_shapes={"y": {0: "n"}, "x": {0: "n"}})
    deployed.save(tmp_path / "art")
    y, x = _grid()
    for runner in (deployed, fxdeploy.load(tmp_path / "art")):
        (atan2, angle), (want_atan2, want_angle) = runner(y, x), Direction()(y, x)
        _assert_identical(atan2, want_atan2, _edges(y, x))
        _assert_identical(angle, want_angle, torch.ones_like(x, dtype=torch.bool))


def test_half_and_integer_inputs_keep_torchs_types() -> None:
    require_target("onnxruntime")

    class Mixed(torch.nn.Module):
        def forward(self, y: torch.Tensor, x: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return torch.atan2(y.half(), x.half()), torch.atan2(k, k.flip(0)), torch.angle(k)

    y, x = _grid()
    k = torch.tensor([0, -3, 4, 0, 7, -1] * 14)[: y.numel()]
    model = Mixed()
    deployed = fxdeploy.lower(model, (y.nan_to_num(), x.nan_to_num(), k), target="onnxruntime")
    (half, ints, angle), (want_half, want_ints, want_angle) = deployed(y, x, k), model(y, x, k)
    assert half.dtype == torch.float16
    _assert_identical(half.float(), want_half.float(), _edges(y, x))
    _assert_identical(ints, want_ints, _edges(k, k.flip(0)))
    _assert_identical(angle, want_angle, torch.ones_like(k, dtype=torch.bool))
