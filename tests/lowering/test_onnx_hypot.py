"""``torch.hypot`` (``fxdeploy/lowering/onnx_translations/hypot.py``): torch.onnx has no translation for it, so a
model measuring a distance with it was refused ("No ONNX function found for prims.hypot"). Now within two float32
steps of torch's, without the overflow of ``sqrt(x^2 + y^2)``, at IEEE's special cases."""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from tests.helpers import require_target


class Distances(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.hypot(a, b), torch.hypot(a.half(), b.half())


def _pairs() -> tuple[torch.Tensor, torch.Tensor]:
    special = [0.0, -0.0, 3.0, -3.0, 1e30, 3e38, 1e-30, 1e-45, float("inf"), float("-inf"), float("nan")]
    a, b = torch.tensor(special).repeat_interleave(len(special)), torch.tensor(special).repeat(len(special))
    generator = torch.Generator().manual_seed(0)
    return (torch.cat([a, torch.randn(135, generator=generator) * 10]).reshape(2, 128),
            torch.cat([b, torch.randn(135, generator=generator)]).reshape(2, 128))


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_hypot_matches_torch_at_extremes_and_special_values(target: str) -> None:
    require_target(target)
    example = (torch.randn(2, 128), torch.randn(2, 128))
    deployed = fxdeploy.lower(Distances(), example, target=target)
    a, b = _pairs()
    (got, got_half), (want, want_half) = deployed(a, b), Distances()(a, b)
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())
    finite = want.isfinite()
    # OpenVINO flushes float32 subnormals (hypot(1e-45, 0)) to 0
    torch.testing.assert_close(got[finite], want[finite], rtol=2.5e-7, atol=torch.finfo(torch.float32).tiny)
    assert got_half.dtype == torch.float16
    if target == "onnxruntime":  # OpenVINO computes half in float32 and drops the casts to half: 1e30 stays finite
        torch.testing.assert_close(got_half, want_half, rtol=1e-3, atol=0, equal_nan=True)
