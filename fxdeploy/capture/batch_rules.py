"""Batching rules for ``fxdeploy.capture.vectorize``, each the same value as the op it stands for.

vmap's built-in rules for some ops read the batch size as a number, which fixes a symbolic batch
in torch.export, and a few ops have no rule at all. Here, while vmap traces a per-image graph:
- ops that treat dim 0 image by image (conv, pooling, norms) fold the images into it (``_FOLD``);
- ``cat``, ``stack`` and ops with a ``dim`` shared by all their tensors run on the whole batch,
  the dim one further (``_DIM_OPS``); ``index_select`` with a per-image index is one flat
  ``index_select`` (whole rows) or a ``gather``;
- ``copy`` and torchvision's ``roi_align`` are spelt with ops that batch;
- ``grid_sampler``'s input and grid pair up row by row: the images fold into their dim 0;
- ``linear`` and ``layer_norm`` of a batched input run with the images as one more leading dim;
- ``scaled_dot_product_attention`` of one image's heads folds the images into its dim 0;
- ``sym_size`` (a per-image graph with a dynamic height) reads the image's size.
Each rule unwraps its operands to the physical batch (images on dim 0) and wraps its result
back, through torch's pre-dispatch wrappers, so that torch.export records them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._C import _functorch as functorch
from torch._functorch import predispatch

aten = torch.ops.aten


_SAME_VALUE: dict[Any, Callable[..., torch.Tensor]] = {
    # functionalized ``dst.copy_(src)``: src, cast and broadcast to dst (torchvision's batch_images)
    aten.copy.default: lambda dst, src, non_blocking=False: src.to(dst.dtype).expand(dst.shape).clone(),
}
"""Ops with no batching rule and no decomposition, spelt with ops that have one."""


_FOLD: dict[Any, int] = {  # op -> how many leading outputs are per image (the rest are not)
    aten.conv1d.default: 1, aten.conv2d.default: 1, aten.conv3d.default: 1,
    aten.convolution.default: 1, aten.conv_transpose2d.input: 1,
    aten._native_batch_norm_legit_no_training.default: 1, aten.native_group_norm.default: 1,
    aten.group_norm.default: 1, aten.batch_norm.default: 1, aten.instance_norm.default: 1,
    aten.max_pool2d.default: 1, aten.max_pool2d_with_indices.default: 2, aten.avg_pool2d.default: 1,
    aten.adaptive_avg_pool2d.default: 1, aten._adaptive_avg_pool2d.default: 1,
    aten.upsample_nearest2d.vec: 1, aten.upsample_bilinear2d.vec: 1,
}
"""Ops that treat dim 0 of their first input image by image: the images fold into it."""

_FOLD_WHEN: dict[Any, Callable[[tuple[Any, ...]], bool]] = {
    aten.batch_norm.default: lambda args: not args[5],  # training=True: statistics over the batch
}

_PAIRED: dict[Any, int] = {aten.grid_sampler.default: 2, aten.grid_sampler_2d.default: 2}
"""Ops whose first n tensors pair up on dim 0, row by row (input and sampling grid)."""

_LEADING = {aten.linear.default, aten.layer_norm.default}
"""Ops over their input's last dim(s), its leading dims independent (vmap's rules read fixed sizes)."""

_DIM_OPS = {
    aten.cat.default, aten.concat.default, aten.stack.default, aten.scatter.src, aten.scatter.value,
    aten.scatter_add.default, aten.gather.default, aten.sort.default, aten.sort.stable, aten.topk.default,
    aten.cumsum.default, aten.select_scatter.default, aten.slice_scatter.default,
}
"""Ops with a ``dim`` whose tensors all share it: run on the whole batch, the dim one further."""


class Batch:
    """The vmap level being traced and its (symbolic) batch size."""

    def __init__(self, level: int, size: torch.SymInt | int) -> None:
        self.level, self.size = level, size

    def physical(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` with the images on dim 0: unwrapped if batched, else the same for every image."""
        if functorch.is_batchedtensor(value):
            return predispatch._remove_batch_dim(value, self.level, self.size, 0)
        return value.expand(self.size, *value.shape)

    def wrap(self, value: torch.Tensor) -> torch.Tensor:
        return predispatch._add_batch_dim(value, 0, self.level)


def is_batched(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and functorch.is_batchedtensor(value)


def tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    for value in (*args, *kwargs.values()):
        items = value if isinstance(value, (list, tuple)) else [value]
        found += [v for v in items if isinstance(v, torch.Tensor)]
    return found


def _fold(batch: Batch, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """An image-by-image op on a batch of one per image: the images become its dim 0."""
    folded = batch.physical(args[0]).flatten(0, 1)
    out = target(folded, *args[1:], **kwargs)
    per_image = _FOLD[target]
    if isinstance(out, torch.Tensor):
        return batch.wrap(out.unsqueeze(1))
    return tuple(batch.wrap(o.unsqueeze(1)) if i < per_image else o for i, o in enumerate(out))


def _dim_op(batch: Batch, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The op on every tensor with the images on dim 0, and its ``dim`` one further."""
    schema = target._schema.arguments
    first = next(t for t in tensors(args, kwargs))
    rank = first.dim() + (1 if target is aten.stack.default else 0)
    bound = {a.name: v for a, v in zip(schema, args, strict=False)} | dict(kwargs)
    dim_arg = next(a for a in schema if a.name == "dim")
    dim = bound.get("dim", dim_arg.default_value)
    bound["dim"] = (dim + rank if dim < 0 else dim) + 1
    for name, value in bound.items():
        if isinstance(value, torch.Tensor):
            bound[name] = batch.physical(value)
        elif isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
            bound[name] = [batch.physical(v) for v in value]
    positional = [a.name for a in schema if not a.kwarg_only and a.name in bound]
    out = target(*[bound.pop(n) for n in positional], **bound)
    return batch.wrap(out) if isinstance(out, torch.Tensor) else tuple(batch.wrap(o) for o in out)


def _index_select(batch: Batch, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``index_select`` with a per-image index. Of an image's rows (dim 0 of the image): one
    ``index_select`` of all images' rows laid end to end, each image's index offset to its own
    rows (ONNX Gather copies whole rows; a gather's index, broadcast to every element, cost 1.7 ms
    of a 95 ms YOLO11n batch on ONNX Runtime). Of another dim: a gather of the index broadcast to
    the row shape. Both give index_select's values wherever index_select accepts the index."""
    source, dim, index = (*args, *kwargs.values())[:3]
    dim = (dim + source.dim() if dim < 0 else dim) + 1
    values = batch.physical(source)
    if not is_batched(index):
        return batch.wrap(values.index_select(dim, index))
    rows = batch.physical(index).reshape(batch.size, -1)
    if dim == 1:  # whole rows of each image: one index_select of the images' rows laid end to end
        starts = torch.arange(batch.size, dtype=rows.dtype, device=rows.device).unsqueeze(1) * values.shape[1]
        picked = values.flatten(0, 1).index_select(0, (rows + starts).reshape(-1))
        return batch.wrap(picked.reshape(batch.size, rows.shape[1], *values.shape[2:]))
    view = [1] * values.dim()
    view[0], view[dim] = -1, rows.shape[1]
    shape = list(values.shape)
    shape[dim] = rows.shape[1]
    return batch.wrap(values.gather(dim, rows.reshape(view).expand(shape)))


def _roi_align(batch: Batch, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """torchvision's ``roi_align`` (features [n, C, H, W], rois [K, 5] whose column 0 is an index
    into the n): every image's features and rois in one call, each roi's index moved to its image's."""
    features, rois, *options = args
    folded = batch.physical(features)  # [V, n, C, H, W]
    boxes = batch.physical(rois)  # [V, K, 5]
    first = torch.arange(batch.size, dtype=boxes.dtype).view(-1, 1, 1) * folded.shape[1]
    boxes = torch.cat([boxes[..., :1] + first, boxes[..., 1:]], -1)
    out = target(folded.flatten(0, 1), boxes.flatten(0, 1), *options, **kwargs)
    return batch.wrap(out.unflatten(0, (batch.size, rois.shape[0])))


def _paired(batch: Batch, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """An op whose leading tensors pair up row by row on dim 0 (``grid_sampler``: input n and
    grid n): every image's rows fold into that dim, and the result unfolds."""
    count = _PAIRED[target]
    rows = args[0].shape[0]
    folded = [batch.physical(t).flatten(0, 1) for t in args[:count]]
    out = target(*folded, *args[count:], **kwargs)
    return batch.wrap(out.unflatten(0, (batch.size, rows)))


def _leading(batch: Batch, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """An op over the last dim(s) whose leading dims are independent (``linear``, ``layer_norm``):
    the images are one more leading dim. A 3-D ``linear`` input is flattened to 2-D first: torch's
    own kernel for a non-contiguous 3-D one branches on its sizes, which fixes the batch."""
    physical = batch.physical(args[0])
    if target is not aten.linear.default:
        return batch.wrap(target(physical, *args[1:], **kwargs))
    out = target(physical.reshape(-1, physical.shape[-1]), *args[1:], **kwargs)
    return batch.wrap(out.reshape(*physical.shape[:-1], out.shape[-1]))


def _attention(batch: Batch, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``scaled_dot_product_attention`` of one image's [1, heads, L, E] query, key and value (and
    mask): the images fold into dim 0, which the op treats image by image."""
    q, k, v, *rest = args
    folded = [batch.physical(t).flatten(0, 1) for t in (q, k, v)]
    mask = rest[0] if rest else kwargs.get("attn_mask")
    if is_batched(mask):
        mask = batch.physical(mask).flatten(0, 1)
        rest, kwargs = ([mask, *rest[1:]], kwargs) if rest else (rest, {**kwargs, "attn_mask": mask})
    out = target(*folded, *rest, **kwargs)
    return batch.wrap(out.unsqueeze(1))


def _per_image_attention(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Query, key, value and a batched mask each one image's [1, ..., L, E], 4-D (the op's own rank)."""
    mask = args[3] if len(args) > 3 else kwargs.get("attn_mask")
    parts = [*args[:3], *([mask] if is_batched(mask) else [])]
    return all(isinstance(t, torch.Tensor) and t.dim() == 4 and t.shape[0] == 1 for t in parts) and (
        mask is None or is_batched(mask) or mask.dim() < 4 or mask.shape[0] == 1
    )


def rule_for(
    target: Any, args: tuple[Any, ...], batched: list[torch.Tensor]
) -> Callable[[Batch, tuple[Any, ...], dict[str, Any]], Any] | None:
    """The rule for ``target`` called with ``args`` of which ``batched`` carry the images, or None."""
    if target in _FOLD and is_batched(args[0]) and len(batched) == 1 and args[0].shape[0] == 1 \
            and _FOLD_WHEN.get(target, lambda _: True)(args):
        return lambda batch, a, k: _fold(batch, target, a, k)
    if target in _DIM_OPS:
        return lambda batch, a, k: _dim_op(batch, target, a, k)
    if target is aten.index_select.default:
        return _index_select
    if str(target) == "torchvision.roi_align.default":
        return lambda batch, a, k: _roi_align(batch, target, a, k)
    if target in _SAME_VALUE:
        return lambda batch, a, k: _SAME_VALUE[target](*a, **k)
    if target in _PAIRED and all(isinstance(t, torch.Tensor) for t in args[: _PAIRED[target]]) \
            and len({t.shape[0] for t in args[: _PAIRED[target]]}) == 1:
        return lambda batch, a, k: _paired(batch, target, a, k)
    if target in _LEADING and is_batched(args[0]) and len(batched) == 1:
        return lambda batch, a, k: _leading(batch, target, a, k)
    if target is aten.scaled_dot_product_attention.default and _per_image_attention(args, {}):
        return lambda batch, a, k: _attention(batch, target, a, k)
    if target is aten.sym_size.int:  # a per-image size (its height): the image's, not the batch's
        return lambda batch, a, k: a[0].shape[a[1]]
    return None
