"""``torch.histc`` with torch's own bin rule (every flavour).

torch's CPU kernel does not bin by edges: it computes ``pos = (x - min) * bins / (max - min)`` in the input's type,
left to right, each step rounded, truncates it, and puts ``pos == bins`` (x == max) in the last bin; values outside
``[min, max]`` and NaN are not counted. torch.onnx's own translation (onnxscript's torch_lib) compares x with edges
``min + i * (max - min) / bins`` computed in double and rounded once, so a value on an interior edge could land in the
neighbouring bin: -0.8 of ``histc(x, 10, -1, 1)`` is bin 0 in torch (``0.19999999 * 10 / 2`` rounds to 0.99999994)
and bin 1 on ONNX Runtime and OpenVINO.

``pos`` only grows with x, so torch's rule is a set of thresholds: the k-th is the smallest value of the input's type
whose ``pos`` reaches k. They are found here, when the graph is built, by bisecting the type's values with torch's
own arithmetic on tensors of that type (float16 and bfloat16 round every step, as the kernel's Half does), and the
graph only compares: it counts the thresholds at or below each value (a binary search of ``log2(bins)`` Gathers) and
adds one per value into its bin (ScatterElements). No arithmetic of the runtime can move a value across an edge.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from onnx import TensorProto, numpy_helper
from onnxscript import opset18 as op

from fxdeploy.lowering.onnx_translations._common import const

TORCH_TYPES = {TensorProto.FLOAT: torch.float32, TensorProto.DOUBLE: torch.float64,
               TensorProto.FLOAT16: torch.float16, TensorProto.BFLOAT16: torch.bfloat16}
BITS = {torch.float32: (torch.int32, 31), torch.float64: (torch.int64, 63), torch.float16: (torch.int16, 15),
        torch.bfloat16: (torch.int16, 15)}


def histc(x: Any, bins: int = 100, min: float = 0.0, max: float = 0.0) -> Any:
    """``aten.histc``. A range taken from the data (``min == max``, the default) is refused, as torch.onnx does."""
    if min == max:
        raise NotImplementedError(f"histc with min == max ({min}) takes its range from the data; give it min < max")
    dtype = TORCH_TYPES.get(x.dtype)
    if dtype is None:
        raise NotImplementedError(f"histc of {x.dtype}: torch.histc takes floating-point tensors only")
    work = TensorProto.DOUBLE if dtype == torch.float64 else TensorProto.FLOAT  # exact for half types
    numpy_work = np.float64 if work == TensorProto.DOUBLE else np.float32
    edges = torch.linspace(min, max, bins + 1, dtype=dtype)  # as torch.histc builds them: its min and max are these
    lo, hi = edges[0], edges[-1]
    if not lo < hi:
        raise NotImplementedError(f"histc of {dtype} over [{min}, {max}]: the range is empty in that type")
    flat = op.Reshape(x, const([-1]))
    if flat.dtype != work:
        flat = op.Cast(flat, to=work)
    inside = op.And(op.GreaterOrEqual(flat, const(float(lo), numpy_work)),
                    op.LessOrEqual(flat, const(float(hi), numpy_work)))
    count = _thresholds_at_or_below(flat, thresholds(bins, lo, hi).double().numpy().astype(numpy_work))
    slot = op.Where(inside, count, const(bins))  # one slot past the bins for values not counted
    zeros = op.ConstantOfShape(const([bins + 1]), value=numpy_helper.from_array(np.zeros(1, numpy_work)))
    ones = op.Expand(const(1.0, numpy_work), op.Shape(flat))
    counts = op.ScatterElements(zeros, slot, ones, axis=0, reduction="add")
    hist = op.Slice(counts, const([0]), const([bins]))
    return hist if x.dtype == work else op.Cast(hist, to=x.dtype)


def torch_bin(values: torch.Tensor, bins: int, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """torch's CPU histc position of ``values`` (of ``lo``'s type), before the last bin takes ``max``: each step
    rounded in that type, the count of bins converted to it first (c10's Half multiplies an int64 so)."""
    return torch.trunc((values - lo) * torch.tensor(bins, dtype=lo.dtype) / (hi - lo))


def thresholds(bins: int, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """[bins - 1] of ``lo``'s type: the k-th (k = 1 .. bins - 1) is the smallest value in [lo, hi] whose position is
    at least k (+inf where none is), by bisection over the type's values in order."""
    ks = torch.arange(1, bins, dtype=torch.float64)
    below, above = _ordered(lo).expand(bins - 1).clone(), _ordered(hi).expand(bins - 1).clone()
    reached = torch_bin(hi.reshape(1), bins, lo, hi).double() >= ks
    while bool((above - 1 > below).any()):  # float64's keys span more than int64: no differences of keys
        middle = (below >> 1) + (above >> 1) + (below & above & 1)
        at_least = torch_bin(_value(middle, lo.dtype), bins, lo, hi).double() >= ks
        above = torch.where(at_least, middle, above)
        below = torch.where(at_least, below, middle)
    return torch.where(reached, _value(above, lo.dtype), torch.tensor(float("inf"), dtype=lo.dtype))


def _ordered(value: torch.Tensor) -> torch.Tensor:
    """int64 keys in the order of the type's values (-0 and +0 share 0)."""
    ints, sign = BITS[value.dtype]
    bits = value.reshape(1).view(ints).to(torch.int64)
    return torch.where(bits < 0, -(bits & ((1 << sign) - 1)), bits)


def _value(keys: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    ints, sign = BITS[dtype]
    bits = torch.where(keys < 0, (-keys) | -(1 << sign), keys)  # the sign bit, as a two's complement int of `ints`
    return bits.to(ints).view(dtype)


def _thresholds_at_or_below(flat: Any, sorted_thresholds: np.ndarray) -> Any:
    """int64, per value: how many of the ascending thresholds are <= it, by a branchless binary search (the list is
    padded with +inf to a power of two minus one, so every probe is in range)."""
    size = 1
    while size <= len(sorted_thresholds):
        size *= 2
    padded = np.full(size - 1, np.inf, sorted_thresholds.dtype)
    padded[: len(sorted_thresholds)] = sorted_thresholds
    table = op.Constant(value=numpy_helper.from_array(padded))
    count = op.Expand(const(0), op.Shape(flat))
    step = size // 2
    while step:
        probe = op.Add(count, const(step))
        reached = op.LessOrEqual(op.Gather(table, op.Sub(probe, const(1)), axis=0), flat)
        count = op.Where(reached, probe, count)
        step //= 2
    return count
