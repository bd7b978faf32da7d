"""RT-DETR's multi-scale deformable attention, written with at most four dims per image.

transformers computes the sampling locations of every head, level and point at once, as
``[B, queries, heads, levels, points, 2]``: five dims per image. An ncnn Mat holds four, so pnnx
leaves that reshape (and the per-level unbind after it) unconverted. This replacement of
``RTDetrMultiscaleDeformableAttention.forward`` computes the same values one level at a time,
as ``[B, queries, heads, points, 2]``, and joins the sampled values along the last dim in
transformers' order (level-major), so the weighted sum adds the same products. It serves every
target (``examples/zoo.py`` substitutes it with the postprocess); only the 4-coordinate reference
boxes RT-DETR's decoder passes are rewritten, and anything else runs transformers' own code.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers.models.rt_detr.modeling_rt_detr import (
    RTDetrMultiscaleDeformableAttention,
    build_2d_sinusoidal_position_embedding,
)


def deformable_attention(
    self: Any,
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    encoder_hidden_states: torch.Tensor | None = None,
    encoder_attention_mask: torch.Tensor | None = None,
    position_embeddings: torch.Tensor | None = None,
    reference_points: torch.Tensor | None = None,
    spatial_shapes: torch.Tensor | None = None,
    spatial_shapes_list: list[tuple[int, int]] | None = None,
    level_start_index: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    if reference_points is None or reference_points.shape[-1] != 4 or spatial_shapes_list is None:
        return RTDetrMultiscaleDeformableAttention.forward(
            self, hidden_states, attention_mask, encoder_hidden_states, encoder_attention_mask,
            position_embeddings, reference_points, spatial_shapes, spatial_shapes_list, level_start_index, **kwargs,
        )
    if position_embeddings is not None:
        hidden_states = hidden_states + position_embeddings
    batch, queries, _ = hidden_states.shape
    heads, levels, points = self.n_heads, self.n_levels, self.n_points
    head_dim = self.d_model // heads
    value = self.value_proj(encoder_hidden_states)
    if attention_mask is not None:
        value = value.masked_fill(~attention_mask[..., None], 0.0)
    offsets = self.sampling_offsets(hidden_states).view(batch, queries, heads, levels, points * 2)
    weights = nn.functional.softmax(self.attention_weights(hidden_states).view(batch, queries, heads, -1), -1)
    sampled, start = [], 0
    for level, (height, width) in enumerate(spatial_shapes_list):
        value_l = value[:, start : start + height * width].transpose(1, 2)
        value_l = value_l.reshape(batch * heads, head_dim, height, width)
        start += height * width
        box = reference_points[:, :, min(level, reference_points.shape[2] - 1)]  # [B, Q, 4]
        center, size = box[:, :, None, None, :2], box[:, :, None, None, 2:]
        offset = offsets[:, :, :, level].view(batch, queries, heads, points, 2)
        locations = center + offset / points * size * 0.5
        grid = (2 * locations - 1).transpose(1, 2).flatten(0, 1)  # [B * heads, Q, points, 2]
        sampled.append(nn.functional.grid_sample(
            value_l, grid, mode="bilinear", padding_mode="zeros", align_corners=False,
        ))  # [B * heads, head_dim, Q, points]
    weights_flat = weights.transpose(1, 2).reshape(batch * heads, 1, queries, levels * points)
    output = (torch.cat(sampled, dim=-1) * weights_flat).sum(-1).view(batch, heads * head_dim, queries)
    output = self.output_proj(output.transpose(1, 2))
    return output, weights.view(batch, queries, heads, levels, points)


def sine_positions(self: Any, width: Any, height: Any, device: Any, dtype: torch.dtype) -> torch.Tensor:
    """``RTDetrSinePositionEmbedding.forward`` without its ``int()`` of the feature map's sizes.

    transformers casts height and width to Python ints to key an LRU cache; on a run-time size
    that cast is a guard pinning the image's H and W to the example's (``(H - 1)//32 + 1 == 4``).
    The same function, called on the sizes as they are, gives the same values at every size."""
    return build_2d_sinusoidal_position_embedding(
        height=height, width=width, embed_dim=self.embed_dim, temperature=self.temperature, device=device,
        dtype=dtype,
    ).unsqueeze(0)
