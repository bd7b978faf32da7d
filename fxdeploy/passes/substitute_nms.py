"""The one spelling of NMS in a lowered graph: ``nms``/``batched_nms`` as ``multiclass_nms``.

``pad_compactions`` calls ``multiclass_keep`` for every ``fxdeploy::nms``/``batched_nms`` (what
torchvision's functions are substituted with) and ``torchvision::nms`` node: the NMS runs over
the boxes at their static size, with padded rows' scores already at -inf, and keeps at most
``top_k``. Its kept indices are padded too: valid ones first, then 0, with their count.
"""

from __future__ import annotations

import operator

import torch

aten = torch.ops.aten
Node = torch.fx.Node
NMS_OPS = ("fxdeploy.nms.default", "fxdeploy.batched_nms.default", "torchvision.nms.default")


def multiclass_keep(graph: torch.fx.Graph, nms: Node, scores: Node, top_k: int) -> tuple[Node, Node]:
    """Insert the ``multiclass_nms`` that keeps what ``nms`` keeps, at most ``top_k``: the kept
    indices ([top_k] long, padding clamped to row 0) and their count (0-d long)."""
    call = graph.call_function
    boxes = nms.args[0]
    if str(nms.target) == "fxdeploy.batched_nms.default":  # torchvision's trick: classes never overlap
        top = call(aten.add.Tensor, (call(aten.max.default, (boxes,)), 1))
        offsets = call(aten.mul.Tensor, (call(aten._to_copy.default, (nms.args[2],), {"dtype": torch.float32}), top))
        boxes = call(aten.add.Tensor, (boxes, call(aten.unsqueeze.default, (offsets, 1))))
    batched_boxes = call(aten.unsqueeze.default, (boxes, 0))
    batched_scores = call(aten.unsqueeze.default, (call(aten.unsqueeze.default, (scores, 0)), 2))
    iou = float(nms.args[-1])
    result = call(
        torch.ops.fxdeploy.multiclass_nms.default,
        (batched_boxes, batched_scores, iou, float("-inf"), top_k, -1, top_k, -1, False),
    )
    index = call(aten.select.int, (call(operator.getitem, (result, 4)), 0, 0))
    count = call(aten.select.int, (call(operator.getitem, (result, 3)), 0, 0))
    return call(aten.clamp.default, (index, 0)), count
