"""``aten.topk`` (and a stable sort) for runtimes whose TopK orders equal values its own way:
ONNX TopK's result (ties by the lower index) from TopKs whose outputs do not depend on tie order.

ONNX's TopK keeps equal values in index order (torch's CPU topk leaves ties in any order, so either
is a correct result of the model, and ONNX Runtime's CPU provider, which lower()'s check runs,
gives ONNX's). Two runtimes do not:
- OpenVINO's ONNX frontend makes TopK unstable; fxdeploy's reader
  (``fxdeploy.runtime.openvino.read_model``) makes it stable again, but OpenVINO's stable TopK is
  slow on a long axis: a detector's ``topk(scores, 1000)`` over 1.3 M anchor scores (torchvision's
  RetinaNet at 320 px) took 5.3 s of a 7 s call; unstable, a few ms.
- GPU runtimes: ONNX Runtime's CUDA TopK ordered CenterNet's tied peaks otherwise than its CPU
  provider (boxes 32 px apart swapped: ``benchmarks/gpu_onnx_sweep.py`` on a lent H200), and
  TensorRT's TopK promises no order among ties: the TensorRT target's ONNX uses this translation.

So the set is chosen with TopKs whose outputs do not depend on how they order ties, and only the
``k`` chosen elements are ordered (``descending_order``):

1. the k-th largest value ``t`` (a TopK's values are the same whatever order it leaves ties in);
2. every element above ``t`` is chosen (at most k - 1 of them), and of those equal to ``t`` the
   ones with the lowest indices: a TopK over ``+inf`` above ``t``, ``-index`` at ``t``, ``-inf``
   below picks exactly that set (its only ties are among the ``+inf``, all of them chosen);
3. the chosen indices in ascending order, then by descending value with ties by position.

Exact where ``-index`` is exact in float32 (an axis under 2**24) and ``k`` is at most
``INT32_SQUARE_ROOT`` (``descending_order``'s keys); elsewhere, and for other dtypes, one TopK
as torch.onnx writes it. NaN is the largest value, as in torch (a NaN and an inf that rank
alike tie by index here).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto
from onnxscript import ir
from onnxscript import opset18 as op

from fxdeploy.lowering.onnx_translations._common import (
    INT32_SQUARE_ROOT,
    _tie_free,
    const,
    descending_order,
    rank,
    static_dim,
)
from fxdeploy.lowering.onnx_translations.sort import sort_stable

EXACT_FLOAT_INDEX = 2**24
INF = float("inf")


def topk_any_tie_order(x: Any, k: Any, dim: int = -1, largest: bool = True, sorted: bool = True) -> tuple[Any, Any]:  # noqa: A002 - aten's name
    axis = dim % rank(x)
    n = static_dim(x, axis)
    if not (
        isinstance(k, int) and 0 < k <= INT32_SQUARE_ROOT and axis == rank(x) - 1
        and n is not None and n < EXACT_FLOAT_INDEX and x.dtype == ir.DataType.FLOAT
    ):
        k_tensor = const([k]) if isinstance(k, int) else op.Reshape(k, const([1]))
        return op.TopK(x, k_tensor, axis=axis, largest=int(largest), sorted=int(sorted))
    # NaN is the largest value, as in torch: first by descending value, last by ascending
    key = op.Where(op.IsNaN(x), const(INF if largest else -INF, np.float32), x if largest else op.Neg(x))
    top, _ = op.TopK(key, const([k]), axis=axis, largest=1, sorted=1)
    kth = op.Slice(_tie_free(top, "values"), const([k - 1]), const([k]), const([axis]))
    minus_index = op.Neg(op.Cast(op.Range(const(0), const(n), const(1)), to=TensorProto.FLOAT))
    ranked = op.Where(
        op.Greater(key, kth), const(INF, np.float32),
        op.Where(op.Equal(key, kth), minus_index, const(-INF, np.float32)),
    )
    chosen_key, chosen = op.TopK(ranked, const([k]), axis=axis, largest=1, sorted=0)
    _tie_free(chosen_key, "values")
    ascending_key, ascending = op.TopK(op.Neg(op.Cast(chosen, to=TensorProto.FLOAT)), const([k]), axis=axis,
                                       largest=1, sorted=1)
    _tie_free(ascending_key, "values")  # distinct indices: no ties
    in_order = op.GatherElements(chosen, ascending, axis=axis)
    order = descending_order(op.GatherElements(key, in_order, axis=axis), const([k]), axis, const([k]))
    indices = op.GatherElements(in_order, order, axis=axis)
    return op.GatherElements(x, indices, axis=axis), indices


def sort_stable_any_tie_order(x: Any, stable: bool | None = None, dim: int = -1,
                              descending: bool = False) -> tuple[Any, Any]:
    """``aten.sort.stable`` as the whole axis's ``topk_any_tie_order``: equal values in index order
    in both directions, as torch's stable sort; one TopK (``sort.py``) where that does not apply."""
    n = static_dim(x, dim % rank(x)) if rank(x) else None
    if not n:  # a 0-d, empty or dynamic axis
        return sort_stable(x, stable, dim, descending)
    return topk_any_tie_order(x, n, dim, largest=descending, sorted=True)


def sort_any_tie_order(x: Any, dim: int = -1, descending: bool = False) -> tuple[Any, Any]:
    """``aten.sort.default`` (``stable=False``, ``argsort``'s): torch leaves equal values in any order,
    and lower()'s check ran ONNX's (index order); the runtime's TopK must not choose another, since
    what follows may read the order (an NMS's tie rule over the sorted boxes)."""
    return sort_stable_any_tie_order(x, None, dim, descending)
