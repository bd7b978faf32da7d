"""torch.fft.rfft on OpenVINO: its import of a one-sided DFT kept a unit dim, so every rfft
artifact failed lower()'s check; ``full_spectrum_rffts`` spells it as the first half of a full FFT."""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from tests.helpers import require_target


class Spectrum(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        s = torch.fft.rfft(x, dim=-1)
        t = torch.fft.rfft(x, n=7, dim=1, norm="forward")
        return torch.view_as_real(s), s.abs(), torch.view_as_real(t)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic_batch"])
def test_rfft_lowers_on_openvino_and_matches_eager(dynamic: bool) -> None:
    require_target("openvino")
    model = Spectrum().eval()
    x = torch.randn(2, 6, 128)
    shapes = {"x": {0: ("batch", 1, 4)}} if dynamic else None
    deployed = fxdeploy.lower(model, (x,), target="openvino", dynamic_shapes=shapes)
    for size in ([2, 6, 128], [3, 6, 128] if dynamic else [2, 6, 128]):
        x = torch.randn(*size)
        for got, want in zip(deployed(x), model(x), strict=True):
            assert got.shape == want.shape
            assert torch.allclose(got, want, atol=1e-4, rtol=1e-5), float((got - want).abs().max())
