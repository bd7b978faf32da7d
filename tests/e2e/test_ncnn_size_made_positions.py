"""A ViT-style model on ncnn with a dynamic height and width, whose position embeddings are made
from the input's size at run time: YOLOS's "mid" position embeddings, in small.

The embeddings are parameters interpolated to the patch grid (so pnnx cannot fold them into
constants); the ones for the layers after the first are laid out per layer ([layers - 1, 1, N, C],
one layer here, as in YOLOS's config) and added before each layer. pnnx takes the leading axis for
the batch and keeps the 1 after it, so the addition made the tokens a 3-D blob and ncnn's
MultiHeadAttention read it wrongly (the lowering's example run raised a LoweringError naming the
engine). ``unit_broadcasts`` drops that 1 before the addition.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import fxdeploy
from tests.helpers import require_target

PATCH, WIDTH, HEADS, GRID, DETECTIONS = 16, 32, 4, 4, 5


class MidPositions(nn.Module):
    """Patch tokens between a class token and detection tokens, as in YOLOS; each position
    embedding covers all three and only its patch part is interpolated."""

    def __init__(self) -> None:
        super().__init__()
        tokens = 1 + GRID * GRID + DETECTIONS
        self.patches = nn.Conv2d(3, WIDTH, PATCH, stride=PATCH)
        self.cls_token = nn.Parameter(torch.randn(1, 1, WIDTH))
        self.detection_tokens = nn.Parameter(torch.randn(1, DETECTIONS, WIDTH))
        self.positions = nn.Parameter(torch.randn(1, tokens, WIDTH) * 0.5)
        self.mid_positions = nn.Parameter(torch.randn(1, 1, tokens, WIDTH) * 0.5)  # [layers - 1, 1, N, C]
        self.norms = nn.ModuleList(nn.LayerNorm(WIDTH) for _ in range(2))
        self.qkv = nn.ModuleList(nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(3)) for _ in range(2))
        self.out = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(2))
        self.head = nn.Linear(WIDTH, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, grid = x.shape[0], (x.shape[2] // PATCH, x.shape[3] // PATCH)
        patches = self.patches(x).flatten(2).transpose(1, 2)
        hidden = torch.cat([self.cls_token.expand(batch, -1, -1), patches,
                            self.detection_tokens.expand(batch, -1, -1)], 1)  # [B, N, C]
        hidden = hidden + _interpolated(self.positions[:, None], grid)[0]
        mid = _interpolated(self.mid_positions, grid)
        for layer in range(2):
            if layer > 0:
                hidden = hidden + mid[layer - 1]
            hidden = hidden + self._attention(layer, self.norms[layer](hidden))
        return self.head(hidden[:, -DETECTIONS:])

    def _attention(self, layer: int, hidden: torch.Tensor) -> torch.Tensor:
        batch, tokens, _ = hidden.shape
        q, k, v = (
            linear(hidden).view(batch, tokens, HEADS, WIDTH // HEADS).transpose(1, 2) for linear in self.qkv[layer]
        )
        attended = F.scaled_dot_product_attention(q, k, v)
        return self.out[layer](attended.transpose(1, 2).reshape(batch, tokens, WIDTH))


def _interpolated(positions: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """[layers, 1, tokens, C] with the patch part resized to ``grid`` (YOLOS's
    InterpolateMidPositionEmbeddings)."""
    layers = positions.shape[0]
    cls, detections = positions[:, :, :1], positions[:, :, -DETECTIONS:]
    patch = positions[:, :, 1:-DETECTIONS].transpose(2, 3).reshape(layers, WIDTH, GRID, GRID)
    patch = F.interpolate(patch, size=grid, mode="bicubic", align_corners=False)
    patch = patch.flatten(2).transpose(1, 2).reshape(layers, 1, grid[0] * grid[1], WIDTH)
    return torch.cat([cls, patch, detections], 2)


def test_size_made_positions_match_eager_on_ncnn_at_two_sizes() -> None:
    require_target("ncnn")
    torch.manual_seed(0)
    model = MidPositions().eval()
    dims = {"x": {0: ("batch", 1, 4), 2: ("height", 32, 128), 3: ("width", 32, 128)}}
    deployed = fxdeploy.lower(model, (torch.randn(2, 3, 64, 64),), target="ncnn", dynamic_shapes=dims)
    assert "unit_broadcasts" in deployed.report.fired
    generator = torch.Generator().manual_seed(1)
    for shape in [(1, 3, 64, 64), (3, 3, 96, 48), (2, 3, 32, 128)]:
        x = torch.randn(shape, generator=generator)
        with torch.no_grad():
            want = model(x)
        torch.testing.assert_close(deployed(x), want, rtol=1e-3, atol=1e-4)
