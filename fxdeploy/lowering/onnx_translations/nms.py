"""``fxdeploy::nms`` and ``fxdeploy::batched_nms`` as ONNX NonMaxSuppression (torchvision semantics).

The substitute_nms pass normally rewrites these data-dependent ops into multiclass_nms. When a
graph still holds one (its consumers were not recognised), these translations keep it exportable
for runtimes with dynamic output shapes (ONNX Runtime, OpenVINO).

Where torchvision and ONNX differ, the graph closes the gap:
- torchvision takes corners as given, so a flipped box (x2 < x1 or y2 < y1) overlaps nothing,
  while ONNX would normalize it: such boxes are collapsed to zero width or height, which
  NonMaxSuppression never matches either;
- batched_nms gives each category its own NMS "class" row (ids shifted to start at 0), so IoU is
  computed on the real coordinates, not on torchvision's offset boxes; the kept list is then put
  in torchvision's order, by decreasing score, ties by index.
Limits: iou_threshold must lie in [0, 1] (ONNX Runtime checks it); NaN and -inf scores are
dropped (torchvision keeps them, NaN first); batched_nms allocates a
[max(idxs) - min(idxs, 0) + 1, N] score matrix, so sparse large category ids cost memory.
"""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
from onnx import TensorProto
from onnxscript import BFLOAT16, DOUBLE, FLOAT, FLOAT16, INT64
from onnxscript import opset18 as op

from fxdeploy.lowering.onnx_translations._common import NEG_INF, const

TFloat = TypeVar("TFloat", FLOAT16, FLOAT, DOUBLE, BFLOAT16)


def _unflipped(boxes: Any) -> Any:
    """[1, N, 4] float32 boxes where flipped axes are collapsed: x2 = max(x1, x2), likewise y."""
    x1, y1, x2, y2 = op.Split(op.Cast(boxes, to=TensorProto.FLOAT), axis=1, num_outputs=4)
    return op.Unsqueeze(op.Concat(x1, y1, op.Max(x1, x2), op.Max(y1, y2), axis=1), const([0]))


def _selected_boxes(selected: Any) -> Any:
    return op.Squeeze(op.Split(selected, axis=1, num_outputs=3)[2], const([1]))


def nms_standard(boxes: TFloat, scores: TFloat, iou_threshold: float) -> INT64:
    """Kept indices by decreasing score; NonMaxSuppression visits ties by lower index too."""
    row = op.Unsqueeze(op.Cast(scores, to=TensorProto.FLOAT), const([0, 1]))  # [1, 1, N]
    selected = op.NonMaxSuppression(
        _unflipped(boxes),
        row,
        op.Shape(scores),
        const([iou_threshold], np.float32),
        const([NEG_INF], np.float32),  # without a threshold a NaN score breaks ONNX Runtime's heap
        center_point_box=0,
    )
    return _selected_boxes(selected)


def batched_nms_standard(boxes: TFloat, scores: TFloat, idxs: INT64, iou_threshold: float) -> INT64:
    ids = op.Cast(idxs, to=TensorProto.INT64)
    with_zero = op.Concat(ids, const([0]), axis=0)  # keeps both reductions defined when N = 0
    ids = op.Sub(ids, op.ReduceMin(with_zero, keepdims=1))
    categories = op.Add(op.ReduceMax(op.Concat(ids, const([0]), axis=0), keepdims=1), const([1]))
    rows = op.Unsqueeze(op.Range(const(0), op.Squeeze(categories, const([0])), const(1)), const([1]))
    values = op.Unsqueeze(op.Cast(scores, to=TensorProto.FLOAT), const([0]))
    matrix = op.Where(op.Equal(rows, op.Unsqueeze(ids, const([0]))), values, const(NEG_INF, np.float32))
    selected = op.NonMaxSuppression(
        _unflipped(boxes),
        op.Unsqueeze(matrix, const([0])),  # [1, categories, N]
        op.Shape(scores),
        const([iou_threshold], np.float32),
        const([NEG_INF], np.float32),  # drops the -inf cells of other categories
        center_point_box=0,
    )
    kept = _selected_boxes(selected)
    count = op.Shape(kept)
    by_index, _ = op.TopK(kept, count, axis=0, largest=0, sorted=1)
    kept_scores = op.Gather(op.Cast(scores, to=TensorProto.FLOAT), by_index, axis=0)
    _, by_score = op.TopK(kept_scores, count, axis=0, largest=1, sorted=1)  # ties: lower index
    return op.Gather(by_index, by_score, axis=0)
