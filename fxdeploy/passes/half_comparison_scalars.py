"""A comparison of a half (or bfloat16) tensor with a number compares with the number rounded to half.

PyTorch compares ``x.half() >= 0.1`` in half: the number takes the tensor's dtype (type promotion:
a number does not widen a tensor of its kind), so it is ``half(0.1) = 0.0999755859375``, and
``x = 0.1`` (which rounds to that half) compares True. torch.onnx's decomposition computes a
half comparison in float32 (``Cast`` of the tensor to float, exact) against the number as a
float32 constant (``0.1f``, not rounded): False there, on ONNX Runtime and OpenVINO alike.

Rewritten, the comparison reads the number torch rounds it to (``double -> float -> half``, as
torch's scalar conversion does). That value is a half, so float32 holds it exactly and a float32
comparison of two halves is the half comparison: the decomposition's float32 then gives eager's
result. A 0-d float tensor compared with a half tensor is cast to half in the graph for the same
reason (torch casts it: a 0-d tensor does not promote a dimensioned one of its kind).
"""

from __future__ import annotations

import math

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import fill_meta
from fxdeploy.settings import Settings

aten = torch.ops.aten
COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
SCALAR = frozenset(getattr(aten, name).Scalar for name in COMPARISONS)
TENSOR = frozenset(getattr(aten, name).Tensor for name in COMPARISONS)
REDUCED = frozenset({torch.float16, torch.bfloat16})


def half_comparison_scalars(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if check(node) is not None:
            continue
        dtype = _dtype(node.args[0]) or _dtype(node.args[1])
        if node.target in SCALAR:
            node.args = (node.args[0], rounded(node.args[1], dtype), *node.args[2:])
        else:
            wide = 0 if _dtype(node.args[1]) in REDUCED else 1
            with gm.graph.inserting_before(node):
                cast = gm.graph.call_function(aten._to_copy.default, (node.args[wide],), {"dtype": dtype})
            fill_meta([cast])
            args = list(node.args)
            args[wide] = cast
            node.args = tuple(args)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def rounded(value: float, dtype: torch.dtype) -> float:
    """``value`` as torch converts a Python number to ``dtype`` (through float32, as c10's Half)."""
    return torch.tensor(value, dtype=torch.float64).to(dtype).item()


def check(node: torch.fx.Node) -> str | None:
    """None where ``node`` compares a half/bfloat16 tensor with a number or a wider 0-d float tensor
    that torch rounds to the tensor's dtype and the exporter does not; else why not."""
    if node.op != "call_function" or node.target not in SCALAR | TENSOR:
        return "not a comparison"
    if node.target in SCALAR:
        value = node.args[1]
        if _dtype(node.args[0]) not in REDUCED or not isinstance(value, float):
            return "not a half or bfloat16 tensor against a float number"
        if math.isnan(value) or rounded(value, _dtype(node.args[0])) == value:
            return f"{value} is already a value of {_dtype(node.args[0])}"
        return None
    dtypes = [_dtype(a) for a in node.args[:2]]
    if sum(d in REDUCED for d in dtypes) != 1:
        return "not one half or bfloat16 operand"
    wide = node.args[0] if dtypes[1] in REDUCED else node.args[1]
    value, other = wide.meta.get("val"), node.args[0] if wide is node.args[1] else node.args[1]
    if not isinstance(value, torch.Tensor) or value.dim() != 0 or not value.is_floating_point():
        return "the other operand is not a 0-d float tensor (it widens the comparison, as in eager)"
    if other.meta["val"].dim() == 0:
        return "both operands are 0-d: the wider dtype wins, as in eager"
    return None


def _dtype(arg: object) -> torch.dtype | None:
    value = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    return value.dtype if isinstance(value, torch.Tensor) else None
