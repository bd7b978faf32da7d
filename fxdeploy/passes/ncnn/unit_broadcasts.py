"""Drop the leading 1 of an operand that broadcasts over the batch.

``hidden + position`` with ``hidden`` [B, N, C] and ``position`` [1, N, C] (a position embedding made
without the images: YOLOS's, interpolated to the input's size) is ``hidden + position[0]``: the same
values, since broadcasting prepends the axis back. ncnn runs one image at a time and pnnx drops the
batch axis of what comes from the images, but keeps the leading 1 of a value it cannot fold into a
constant (one computed from the input's size). It then reshapes the image's [N, C] to [1, N, C] to
add them, and ncnn's layers after that (MultiHeadAttention) read the 3-D blob wrongly. Without the
leading 1, both operands are [N, C] per image.
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.settings import Settings

aten = torch.ops.aten


def unit_broadcasts(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or torch.Tag.pointwise not in getattr(node.target, "tags", ()):
            continue
        if node.target._schema.is_mutable:  # an in-place op writes into its first operand as it is
            continue
        operands = [a for a in node.args[:2] if isinstance(a, torch.fx.Node)]
        values = [a.meta.get("val") for a in operands]
        if len(operands) != 2 or not all(isinstance(v, torch.Tensor) and v.dim() >= 2 for v in values):
            continue
        for k, (operand, value) in enumerate(zip(operands, values, strict=True)):
            other = values[1 - k]
            if value.dim() != other.dim() or not _is_one(value.shape[0]) or _is_one(other.shape[0]):
                continue
            with gm.graph.inserting_before(node):
                squeezed = gm.graph.call_function(aten.squeeze.dim, (operand, 0))
            squeezed.meta["val"] = value.squeeze(0)
            node.replace_input_with(operand, squeezed)
            modified = True
            break
    return PassResult(gm, modified)


def _is_one(size: object) -> bool:
    return isinstance(size, int) and size == 1
