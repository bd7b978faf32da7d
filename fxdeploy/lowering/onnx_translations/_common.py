"""Pieces shared by the multiclass_nms translations: constants, dims, score masking, pre_top_k.

The translations are plain Python functions that torch.onnx's dynamo exporter *traces*: tensors
arrive as graph values, and float/int/bool arguments as Python values, so Python branches on
those arguments choose the graph and cost nothing at run time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any

import numpy as np
from onnx import TensorProto, numpy_helper
from onnxscript import opset18 as op

from fxdeploy.artifact.onnx_files import TIE_FREE

NEG_INF = float("-inf")

LOWEST = float(np.nextafter(np.finfo(np.float32).min, np.float32(0)))
"""What ranks last in a TopK key (largest first) that fxdeploy writes: the float32 one step above
the lowest finite one; never -inf, nor the lowest itself. ONNX Runtime's CUDA TopK pads each row
with the lowest finite value: up to a power of two (``BitonicTopK``, short rows), or its
block sort's spare slots, whose indices it never sets (``RadixTopK``, longer rows). A kept key at
or below that padding loses to it, and the TopK returns padding: indices past the row, or
unset ones. Seen on an H100 with onnxruntime-gpu 1.31.1: YOLO11n's batched ONNX kept 2 of eager's
2144 detections with -inf as the key and 3 with the lowest finite value, all 2144 with this one,
while the CPU provider matched eager throughout."""

INT32_SQUARE_ROOT = 46340
"""The largest N whose keys ``dense * N + index`` stay below 2**31: OpenVINO's CPU plugin computes
int64 as int32."""


def const(value: Any, dtype: type = np.int64) -> Any:
    """A Constant node holding ``value`` (scalar or nested list) with the given numpy dtype."""
    return op.Constant(value=numpy_helper.from_array(np.asarray(value, dtype=dtype)))


_DIM_BOUNDS: ContextVar[Mapping[str, int] | None] = ContextVar("fxdeploy_dim_bounds", default=None)


@contextlib.contextmanager
def dim_bounds(bounds: Mapping[str, int]) -> Iterator[None]:
    """Upper bounds of the export's symbolic dims by name (capture's range constraints: the
    user's ``dynamic_shapes`` maxima), for the translations run inside this block."""
    token = _DIM_BOUNDS.set(dict(bounds))
    try:
        yield
    finally:
        _DIM_BOUNDS.reset(token)


def dim_bound(value: Any, axis: int) -> int | None:
    """The largest size of ``value`` along ``axis``: its static size, or the bound of its
    symbolic dim where that dim is one of the export's bounded symbols; otherwise None."""
    shape = getattr(value, "shape", None)
    if shape is None:
        return None
    dim = shape[axis]
    return dim if isinstance(dim, int) else (_DIM_BOUNDS.get() or {}).get(str(dim))


def static_dim(value: Any, axis: int) -> int | None:
    """The static size of ``value`` along ``axis``, or None when symbolic or unknown."""
    shape = getattr(value, "shape", None)
    if shape is None:
        return None
    dim = shape[axis]
    return dim if isinstance(dim, int) else None


def rank(value: Any) -> int:
    """The rank of a translation input; boxes' rank picks the shared or per-class layout."""
    shape = getattr(value, "shape", None)
    if shape is None:
        raise ValueError("multiclass_nms lowering needs the rank of boxes; the exporter gave none")
    return len(shape)


def dim(value: Any, axis: int) -> Any:
    """The size of ``value`` along ``axis`` as a 1-element int64 tensor (folded when static)."""
    size = static_dim(value, axis)
    if size is not None:
        return const([size])
    return op.Shape(value, start=axis, end=axis + 1)


def without_background(scores: Any, num_classes: Any, background_label_id: int) -> Any:
    """float32 scores where the background class is -inf, so it is never a candidate."""
    s = op.Cast(scores, to=TensorProto.FLOAT)
    if background_label_id < 0:
        return s
    classes = op.Range(const(0), op.Squeeze(num_classes, const([0])), const(1))
    return op.Where(op.Equal(classes, const(background_label_id)), const(NEG_INF, np.float32), s)


def below_candidates(score_threshold: float) -> float:
    """The finite float32 that stands for a non-candidate in a TopK key: the threshold itself, which
    every candidate (score > threshold, in float32) exceeds, clamped to [LOWEST, -LOWEST]. The one
    case this gives up: with a threshold below LOWEST, a candidate scored the lowest finite float32
    ranks under the floor, and the final top-K can leave it out."""
    return float(np.clip(np.float32(score_threshold), LOWEST, -LOWEST))


def nan_to_neg_inf(scores: Any) -> Any:
    """NaN scores as -inf. NonMaxSuppression needs no help (any threshold test fails on NaN),
    but ReduceMax and TopK would let a NaN win, so ranking code uses this first."""
    return op.Where(op.IsNaN(scores), const(NEG_INF, np.float32), scores)


def _tie_free(value: Any, role: str) -> Any:
    value.name = f"{TIE_FREE}_{role}_{id(value)}"  # unique in the graph: the value itself is alive
    return value


def descending_order(values: Any, count: Any, axis: int, k: Any) -> Any:
    """int64: the indices of the first ``k`` elements of float ``values`` along ``axis`` (of size
    ``count``, a [1] tensor) by descending value, then ascending index (ONNX TopK's order),
    without a stable sort: OpenVINO's stable TopK over thousands of elements costs tens of times
    its unstable one.

    An unstable TopK sorts the values; a CumSum over where the sorted value changes gives each
    element its dense rank (equal values share one, whatever order the TopK left them in);
    ``dense * N + index`` is then a unique key in the wanted order, which a second TopK sorts
    (unique keys: no ties to order). Needs N <= INT32_SQUARE_ROOT; values without NaN.
    """
    sorted_values, order = op.TopK(values, count, axis=axis, largest=1, sorted=1)
    _tie_free(sorted_values, "values")
    _tie_free(order, "order")
    previous = op.Concat(
        op.Slice(sorted_values, const([0]), const([1]), const([axis])),
        op.Slice(sorted_values, const([0]), const([-1]), const([axis])),
        axis=axis,
    )
    group_starts = op.Cast(op.Not(op.Equal(sorted_values, previous)), to=TensorProto.INT64)
    zeros = op.ConstantOfShape(op.Shape(order), value=numpy_helper.from_array(np.zeros(1, np.int64)))
    dense = op.ScatterElements(zeros, order, op.CumSum(group_starts, const(axis)), axis=axis)
    _, key_order = op.TopK(op.Add(op.Mul(dense, count), positions(order, count)), k, axis=axis, largest=0, sorted=1)
    return _tie_free(key_order, "order")


def positions(like: Any, count: Any) -> Any:
    """0 .. count-1 along the last axis, expanded to the shape of ``like``."""
    return op.Expand(op.Range(const(0), op.Squeeze(count, const([0])), const(1)), op.Shape(like))


def descending_positions(values: Any, count: Any, axis: int) -> Any:
    """int64, the shape of ``values``: where each element lands in ``descending_order`` (the last axis)."""
    order = descending_order(values, count, axis, count)
    zeros = op.ConstantOfShape(op.Shape(order), value=numpy_helper.from_array(np.zeros(1, np.int64)))
    return op.ScatterElements(zeros, order, positions(order, count), axis=axis)


def pre_top_k_boxes(scores: Any, pre_top_k: int, num_boxes: Any) -> Any:
    """[B, k] indices of the pre_top_k boxes by max-over-classes score, in increasing box order.

    TopK breaks ties by the lower index, as the spec asks. Sorting the chosen indices back into
    box order keeps NMS's own tie rule (lower box index first) working on the gathered subset.
    A box with no score above -inf ranks as LOWEST (never a candidate, whichever is kept).
    """
    best = op.Max(op.ReduceMax(nan_to_neg_inf(scores), const([2]), keepdims=0), const(LOWEST, np.float32))
    k = op.Min(const([pre_top_k]), num_boxes)
    _, top = op.TopK(best, k, axis=1, largest=1, sorted=1)
    ordered, _ = op.TopK(op.Neg(top), k, axis=1, largest=1, sorted=1)
    return op.Neg(ordered)


def padded_outputs(
    filled: Any, boxes: Any, box_row: Any, scores: Any, labels: Any, index: Any
) -> tuple[Any, Any, Any, Any, Any]:
    """Spec step 5 for the K output rows of each image: where ``filled`` is False, boxes 0, score 0,
    label -1 and index -1. ``boxes`` [R, 4] float32 are gathered at ``box_row`` [B, K], from an
    appended zero row for the padding rows (row -1)."""
    source = op.Concat(boxes, const(np.zeros((1, 4)), np.float32), axis=0)
    minus_one = const(-1)
    return (
        op.Gather(source, op.Where(filled, box_row, minus_one), axis=0),
        op.Where(filled, scores, const(0.0, np.float32)),
        op.Where(filled, labels, minus_one),
        op.ReduceSum(op.Cast(filled, to=TensorProto.INT64), const([1]), keepdims=0),
        op.Where(filled, index, minus_one),
    )
