"""Values made from the image's size at run time, on ncnn with a dynamic height and width.

RT-DETR and DETR make position embeddings, anchors and masks from feature-map sizes with
``torch.arange``, ``torch.ones``, ``meshgrid`` and comparisons, ops ncnn has no layers for; pnnx
folds them into constants only at a fixed size (lower() raised LoweringError at check_layers). The
host split now computes them on the host, between two engine stages, and the second engine takes
them as inputs: batched ones per image, and those without a batch axis (a [N, C] embedding, [N, 4]
anchors) given whole to every image (``shared_inputs`` in the plan).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import fxdeploy
from tests.helpers import require_target

WIDTH = 16


class SizeMadeEncoder(nn.Module):
    """A conv stem, then tokens plus a 2-D sin-cos embedding and anchors made from the grid size."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, WIDTH, 8, stride=8)
        self.mix = nn.Linear(WIDTH, WIDTH)
        self.boxes = nn.Linear(WIDTH, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.stem(x)
        height, width = features.shape[2], features.shape[3]
        tokens = features.flatten(2).transpose(1, 2)  # [B, HW, C]
        grid_y, grid_x = torch.meshgrid(
            torch.arange(height, dtype=torch.float32), torch.arange(width, dtype=torch.float32), indexing="ij"
        )
        omega = 1.0 / 100.0 ** (torch.arange(WIDTH // 4, dtype=torch.float32) / (WIDTH // 4))
        out_x, out_y = grid_x.flatten()[:, None] * omega, grid_y.flatten()[:, None] * omega
        position = torch.cat([out_x.sin(), out_x.cos(), out_y.sin(), out_y.cos()], 1)[None]  # [1, HW, C]
        centers = torch.stack([(grid_x + 0.5) / width, (grid_y + 0.5) / height], -1).reshape(1, -1, 2)
        anchors = torch.cat([centers, torch.ones_like(centers) * 0.05], -1)  # [1, HW, 4]
        hidden = self.mix(tokens + position).relu()
        return hidden, self.boxes(hidden) + anchors


@pytest.mark.parametrize(
    ("batch", "sizes"),
    [
        pytest.param(("batch", 1, 4), [(1, 3, 64, 64), (3, 3, 96, 48), (2, 3, 32, 128)], id="dynamic-batch"),
        pytest.param(None, [(2, 3, 64, 64), (2, 3, 96, 48)], id="batch-fixed-at-2"),
    ],
)
def test_size_made_values_run_on_the_host_and_feed_the_engine(batch, sizes) -> None:
    require_target("ncnn")
    torch.manual_seed(0)
    model = SizeMadeEncoder().eval()
    dims = {"x": {2: ("height", 32, 128), 3: ("width", 32, 128), **({0: batch} if batch else {})}}
    deployed = fxdeploy.lower(model, (torch.randn(2, 3, 64, 64),), target="ncnn", dynamic_shapes=dims)
    stages = deployed.manifest["info"]["ncnn"]["stages"]
    assert [s["kind"] for s in stages] == ["empty", "host", "engine"]  # the stem moved to the engine after
    assert next(s for s in stages if s["kind"] == "engine")["shared_inputs"]
    generator = torch.Generator().manual_seed(1)
    for shape in sizes:
        x = torch.randn(shape, generator=generator)
        with torch.no_grad():
            want = model(x)
        for got, expected in zip(deployed(x), want, strict=True):
            torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-4)
