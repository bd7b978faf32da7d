"""OpenVINO's ONNX frontend refusing ops is relayed naming each op and its reason."""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from fxdeploy.errors import LoweringError
from tests.helpers import require_target


class Spectrogram(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        window = torch.hann_window(64)
        return torch.stft(x, 64, hop_length=16, window=window, return_complex=True).abs()


def test_ops_the_frontend_cannot_convert_are_named_with_their_reason() -> None:
    """An STFT at a dynamic batch: OpenVINO 2026's frontend wants the signal's shape static."""
    require_target("openvino")
    with pytest.raises(LoweringError) as info:
        fxdeploy.lower(Spectrogram().eval(), (torch.randn(2, 512),), target="openvino",
                       dynamic_shapes={"x": {0: ("batch", 1, 8)}})
    message = str(info.value)
    assert "OpenVINO's ONNX frontend could not convert op(s) of the model" in message, message
    assert "STFT-23 (Shape of signal input must be static" in message, message
    assert "use target 'onnxruntime' or 'torchscript'" in message, message
    assert "did not expect" not in message, message


def test_the_same_model_at_fixed_sizes_lowers() -> None:
    require_target("openvino")
    model, x = Spectrogram().eval(), torch.randn(2, 512)
    deployed = fxdeploy.lower(model, (x,), target="openvino")
    assert torch.allclose(deployed(x), model(x), atol=1e-3, rtol=1e-4)
