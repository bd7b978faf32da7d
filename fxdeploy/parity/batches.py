"""The example inputs at other batch sizes, for ``compare --batch`` and ``bench --batch``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fxdeploy.errors import InputError


def rebatch(inputs: tuple[Any, ...], batch: int | None) -> tuple[Any, ...]:
    """Inputs with dim 0 resized to ``batch`` by cycling the example rows (deterministic)."""
    if batch is None:
        return inputs
    if batch < 1:
        raise InputError(f"batch: expected an integer >= 1, got {batch}")

    def resize(x: Any) -> Any:
        if not isinstance(x, torch.Tensor) or x.dim() == 0:
            return x
        return x[torch.arange(batch) % x.shape[0]].contiguous()

    return tuple(pytree.tree_map(resize, inputs))


def batch_dims(inputs: tuple[Any, ...], batches: Sequence[int]) -> tuple[Any, ...]:
    """torch.export-style dynamic shapes: dim 0 of every top-level tensor input is one ``batch``
    dim spanning 1 to the largest batch asked for (at least the example's, and 8)."""
    tensors = [x for x in inputs if isinstance(x, torch.Tensor) and x.dim() > 0]
    top = max([8, *batches, *(int(x.shape[0]) for x in tensors)])
    return tuple({0: ("batch", 1, top)} if any(x is t for t in tensors) else None for x in inputs)
