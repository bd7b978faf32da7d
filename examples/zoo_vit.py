"""ViT at any resolution: the zoo's ViT as a user runs it on images of several sizes.

transformers' ViT takes another image size only with ``interpolate_pos_encoding=True``, which
resizes its learned position embeddings to the patch grid (bicubic). ``AnyResolution`` passes that
flag, since fxdeploy's inputs are tensors. ``ViTEmbeddings.interpolate_pos_encoding`` returns the
embeddings unchanged when the grid is square and of the trained size, a Python test on the sizes
that torch.export turns into guards pinning H and W to the example's (its ``height == width``,
``num_patches == num_positions``). ``any_size_positions`` keeps that shortcut for sizes known when
it runs (eager, a static capture) and interpolates for run-time sizes, so a dynamic H/W captures.
The values are the same: at the trained grid, bicubic resizing to the same size is the identity
(its taps at integer offsets are 0, 1, 0, 0).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.models.vit.modeling_vit import ViTEmbeddings

from fxdeploy import Substitution


class AnyResolution(nn.Module):
    """``model(pixel_values, interpolate_pos_encoding=True)``: a ViT classifier for any H and W."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> object:
        return self.model(pixel_values=pixel_values, interpolate_pos_encoding=True)


def any_size_positions(self: ViTEmbeddings, embeddings: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """``ViTEmbeddings.interpolate_pos_encoding`` without guards on run-time sizes."""
    trained = self.position_embeddings
    dim = embeddings.shape[-1]
    side = round((trained.shape[1] - 1) ** 0.5)
    grid = (height // self.patch_size, width // self.patch_size)
    if all(isinstance(n, int) for n in grid) and grid == (side, side):
        return trained
    patches = trained[:, 1:].reshape(1, side, side, dim).permute(0, 3, 1, 2)
    patches = nn.functional.interpolate(patches, size=grid, mode="bicubic", align_corners=False)
    return torch.cat((trained[:, :1], patches.permute(0, 2, 3, 1).reshape(1, -1, dim)), dim=1)


VIT_SUBSTITUTIONS = {
    ViTEmbeddings.interpolate_pos_encoding: Substitution(ViTEmbeddings.interpolate_pos_encoding, any_size_positions)
}
