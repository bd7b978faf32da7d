"""``nn.TransformerEncoder`` with a padding mask, captured as eager inference computes it.

In eval mode without grad, ``TransformerEncoder.forward`` runs a padded batch as nested tensors
(its "sparsity fast path") when the padding mask is left-aligned, every row's padding at its end,
and pads the result back with zeros: every padded position of the output is 0 before the final
norm. Under ``torch.export`` it takes the dense path instead ("mask_check enabled with
torch.compile or torch.export"), where the padded positions hold whatever attention computed
there. An artifact captured as it is differs from eager at every padded position (2.8 on a small
encoder), and lower()'s check refuses it on every target.

``encoder_forward`` is the capture's spelling of the same computation: the dense layers, then
where eager would have gone nested (the static conditions below, and the mask left-aligned,
decided in the graph for each input), zeros at the padded positions, then the norm. It is a
substitution with ``eager_equivalent``: lower()'s check runs the encoder's own forward, so the
artifact is compared with what eager computes, not with this function.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import torch


def encoder_forward(
    self: torch.nn.TransformerEncoder, src: torch.Tensor, mask: torch.Tensor | None = None,
    src_key_padding_mask: torch.Tensor | None = None, is_causal: bool | None = None,
) -> torch.Tensor:
    if not _may_go_nested(self, src, mask, src_key_padding_mask):
        return torch.nn.TransformerEncoder.forward(self, src, mask, src_key_padding_mask, is_causal)
    kept = src_key_padding_mask.logical_not()  # a float mask keeps its zeros, as eager's logical_not does
    checked, padding = getattr(self, "mask_check", True), src_key_padding_mask
    if not checked:  # unchecked, eager takes each row's first count(kept) positions as that row
        kept = torch.arange(kept.shape[1], device=kept.device) < kept.sum(1, keepdim=True)
        padding = kept.logical_not()
    output = src
    for layer in self.layers:  # no attention mask here, so the layers' is_causal is only what was said
        output = layer(output, src_mask=None, is_causal=is_causal is True, src_key_padding_mask=padding)
    zeroed = output.masked_fill(kept.logical_not().unsqueeze(-1), 0.0)
    if checked:  # eager checks that every row keeps a prefix, or stays dense
        left_aligned = (kept[:, 1:] & kept[:, :-1].logical_not()).any().logical_not()
        zeroed = torch.where(left_aligned, zeroed, output)
    return self.norm(zeroed) if self.norm is not None else zeroed


def _may_go_nested(self: Any, src: torch.Tensor, mask: Any, padding: Any) -> bool:
    """torch's static conditions for the nested path, as eager inference meets them (no grad)."""
    first = self.layers[0]
    return (
        torch.backends.mha.get_fastpath_enabled()
        and bool(getattr(self, "use_nested_tensor", False))
        and getattr(first.self_attn, "batch_first", False)
        and not first.training
        and src.dim() == 3
        and isinstance(padding, torch.Tensor)
        and padding.dim() == 2
        and not src.is_nested
        and mask is None
        and not torch.is_autocast_enabled()
        and src.device.type in ("cpu", "cuda", "xpu")
    )


@contextlib.contextmanager
def eager_nested_quiet() -> Iterator[None]:
    """Where lower()'s check runs the encoder eagerly, torch's note that nested tensors are a
    prototype is about torch's own code path, not the user's: held back."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*nested tensors is in prototype stage.*")
        yield
