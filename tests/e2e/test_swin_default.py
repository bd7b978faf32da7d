"""transformers' Swin at its default configuration (224 px, window 7, embed 96, 3 heads first):
its attention output, transposed back from SDPA and reshaped, lowers on the ONNX targets with the
default settings and matches eager (fxdeploy/passes/contiguous_reshapes.py says why it failed)."""

from __future__ import annotations

import functools
import os

import pytest
import torch

import fxdeploy
from tests.helpers import require_target

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")


class LastHiddenState(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model = transformers.SwinModel(transformers.SwinConfig())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x).last_hidden_state


@functools.cache
def _swin() -> LastHiddenState:
    """One for the module, never changed by a test: lowered for another target it starts from the
    first lowering's capture (fxdeploy.capture.memo), as in a user's process."""
    torch.manual_seed(0)
    return LastHiddenState().eval()


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_default_swin_matches_eager(target: str) -> None:
    require_target(target)
    model = _swin()
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    deployed = fxdeploy.lower(model, (x,), target=target)
    other = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(2))
    for images in (x, other):
        with torch.no_grad():
            want = model(images)
        got = deployed(images)
        assert got.shape == want.shape == (1, 49, 768)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-4 * float(want.abs().max()))
