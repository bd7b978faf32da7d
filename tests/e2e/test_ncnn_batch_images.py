"""torchvision's detection transform on ncnn: a list of images, ``interpolate(image[None])[0]``, and a
batch made by copying each image into a new zero-filled buffer.

Passes see the copy functionalized: a copy and a chain of scatters back into the buffer, which pnnx
has no ncnn layer for. ``padded_copies`` spells each scatter into the zero-filled buffer as a pad,
``scatters_as_slices`` the copy as its source, and ``unit_selects`` the batch-axis selects as squeezes.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fxdeploy
from tests.helpers import require_target


class TransformThenConv(nn.Module):
    """GeneralizedRCNNTransform (normalize, resize, batch with size_divisible) and a conv, at one image."""

    def __init__(self, size_divisible: int) -> None:
        super().__init__()
        self.size_divisible = size_divisible
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]))
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        resized = []
        for image in images.unbind(0):
            image = (image - self.mean[:, None, None]) / self.std[:, None, None]
            resized.append(F.interpolate(image[None], scale_factor=0.75, mode="bilinear")[0])
        stride = self.size_divisible
        height = (max(i.shape[1] for i in resized) + stride - 1) // stride * stride
        width = (max(i.shape[2] for i in resized) + stride - 1) // stride * stride
        batched = resized[0].new_full((len(resized), 3, height, width), 0)
        for i, image in enumerate(resized):
            batched[i, : image.shape[0], : image.shape[1], : image.shape[2]].copy_(image)
        return self.conv(batched)


@pytest.mark.parametrize("size_divisible", [1, 32], ids=["unpadded", "padded"])
def test_the_transform_runs_on_ncnn_and_matches_eager(size_divisible: int) -> None:
    require_target("ncnn")
    torch.manual_seed(0)
    model = TransformThenConv(size_divisible).eval()
    deployed = fxdeploy.lower(model, (torch.rand(1, 3, 40, 56),), target="ncnn")
    assert {"padded_copies", "scatters_as_slices", "unit_selects"} <= set(deployed.report.fired)
    for seed in (1, 2):
        x = torch.rand(1, 3, 40, 56, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            want = model(x)
        got = deployed(x)
        assert got.shape == want.shape == (1, 4, 30 if size_divisible == 1 else 32, 42 if size_divisible == 1 else 64)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
