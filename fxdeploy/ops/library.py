"""The ``fxdeploy::`` custom ops: schema, eager kernel (the reference) and fake kernel.

These are the nodes that captured graphs carry and that lowerings translate. Arguments are
checked by the public wrappers in ``fxdeploy.ops`` before the op is called, where shapes are
concrete; the ops themselves stay free of checks so that they trace cleanly.
No ``from __future__ import annotations``: ``custom_op`` reads the annotations as types.
"""

import torch
from torch import Tensor

from fxdeploy.ops.reference import batched_nms_reference, multiclass_nms_reference, nms_reference


@torch.library.custom_op("fxdeploy::multiclass_nms", mutates_args=())
def multiclass_nms_op(
    boxes: Tensor,
    scores: Tensor,
    iou_threshold: float,
    score_threshold: float,
    max_output_boxes_per_class: int,
    pre_top_k: int,
    keep_top_k: int,
    background_label_id: int,
    class_agnostic: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    return multiclass_nms_reference(
        boxes,
        scores,
        iou_threshold,
        score_threshold,
        max_output_boxes_per_class,
        pre_top_k,
        keep_top_k,
        background_label_id,
        class_agnostic,
    )


@multiclass_nms_op.register_fake
def _multiclass_nms_fake(
    boxes: Tensor,
    scores: Tensor,
    iou_threshold: float,
    score_threshold: float,
    max_output_boxes_per_class: int,
    pre_top_k: int,
    keep_top_k: int,
    background_label_id: int,
    class_agnostic: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Static shapes [B, K, ...]: this is what makes the op deployable where NMS is not."""
    batch = scores.shape[0]
    index = torch.long
    return (
        boxes.new_empty((batch, keep_top_k, 4)),
        scores.new_empty((batch, keep_top_k)),
        scores.new_empty((batch, keep_top_k), dtype=index),
        scores.new_empty((batch,), dtype=index),
        scores.new_empty((batch, keep_top_k), dtype=index),
    )


@torch.library.custom_op("fxdeploy::nms", mutates_args=())
def nms_op(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    return nms_reference(boxes, scores, iou_threshold)


@nms_op.register_fake
def _nms_fake(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """The number kept depends on the data: an unbacked size, which substitute_nms removes."""
    kept = torch.library.get_ctx().new_dynamic_size()
    return scores.new_empty((kept,), dtype=torch.long)


@torch.library.custom_op("fxdeploy::batched_nms", mutates_args=())
def batched_nms_op(boxes: Tensor, scores: Tensor, idxs: Tensor, iou_threshold: float) -> Tensor:
    return batched_nms_reference(boxes, scores, idxs, iou_threshold)


@batched_nms_op.register_fake
def _batched_nms_fake(boxes: Tensor, scores: Tensor, idxs: Tensor, iou_threshold: float) -> Tensor:
    kept = torch.library.get_ctx().new_dynamic_size()
    return scores.new_empty((kept,), dtype=torch.long)


@torch.library.register_vmap("fxdeploy::multiclass_nms")
def _multiclass_nms_vmap(info, in_dims, boxes, scores, *options):  # noqa: ANN001, ANN202 - torch's signature
    """Batched by definition: images of a vmap and the op's own batch fold into one batch dim
    (``fxdeploy.capture.vectorize`` runs a per-image graph, whose NMS sees a batch of one, over a batch)."""
    size = info.batch_size
    boxes = boxes.movedim(in_dims[0], 0) if in_dims[0] is not None else boxes.expand(size, *boxes.shape)
    scores = scores.movedim(in_dims[1], 0) if in_dims[1] is not None else scores.expand(size, *scores.shape)
    inner = scores.shape[1]
    outputs = multiclass_nms_op(boxes.flatten(0, 1), scores.flatten(0, 1), *options)
    return tuple(o.unflatten(0, (size, inner)) for o in outputs), (0,) * len(outputs)
