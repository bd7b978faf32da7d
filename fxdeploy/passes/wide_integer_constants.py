"""An integer constant past int32 in integer arithmetic is refused on OpenVINO, naming the line.

OpenVINO's CPU plugin computes int64 as int32, converting each constant on the way: a sentinel
``torch.where(valid, ids, torch.iinfo(torch.int64).max)`` came back 2147483520 where eager keeps
9223372036854775807, ``x == 2**33`` compared with another number, ``x.masked_fill(m, -2**40)`` filled
another value. lower()'s check refused that only where the example reached the constant (a row with
no valid entry); lowered from another, the artifact was silently wrong there. The executor refuses an
int64 *input* past int32 (``fxdeploy/runtime/openvino.py``); this refuses such a number in the code:
a Python int operand of an op on int64 values, or an int64 constant tensor holding one. Sizes and
indices are not values (a slice's end of 2**63 - 1, ``x[:, 1:]``'s, is OpenVINO's own convention).
"""

from __future__ import annotations

import torch

from fxdeploy.errors import LoweringError
from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import call_site
from fxdeploy.settings import Settings

INT32 = torch.iinfo(torch.int32)
VALUE_OPS = frozenset({
    "where", "full", "full_like", "new_full", "fill", "masked_fill", "index_fill", "scalar_tensor", "add", "sub",
    "rsub", "mul", "div", "remainder", "floor_divide", "fmod", "bitwise_and", "bitwise_or", "bitwise_xor", "clamp",
    "clamp_min", "clamp_max", "eq", "ne", "lt", "le", "gt", "ge", "maximum", "minimum", "constant_pad_nd", "scatter",
})
"""The ops whose int operands are values computed with (a pad value, a fill, an operand), not sizes."""


def wide_integer_constants(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    for node in gm.graph.nodes:
        number = _wide_constant(gm, node)
        if number is None:
            continue
        what = f"{node.target} computes int64 values with {number}"
        if node.op == "get_attr":  # a constant has no line of its own: the first op reading it has
            what = f"the int64 constant {node.target!r} ({', '.join(map(call_site, node.users))}) holds {number}"
        raise LoweringError(
            f"{call_site(node) if node.op != 'get_attr' else 'openvino'}: {what}, past int32's range: OpenVINO "
            "computes int64 as int32 and converts the number (torch.iinfo(torch.int64).max became 2147483520), so "
            "the artifact would differ from eager wherever it reaches an output. Use a smaller number (within "
            "2**24 of 0 where it is compared or reduced: OpenVINO's integer min, max and sum go through float32), "
            "or lower for target 'onnxruntime', which computes int64"
        )
    return PassResult(gm, False)


def check(node: torch.fx.Node) -> str | None:
    """None where ``node`` is an op on int64 values that reads a number past int32 (the refusal
    applies), else why not. Constant tensors are read by the pass (``get_attr``)."""
    if node.op != "call_function" or getattr(node.target, "_opname", None) not in VALUE_OPS:
        return "not an op whose int operands are values"
    if not _reads_int64(node):
        return "computes no int64 values"
    if not any(_wide(arg) for arg in (*node.args, *node.kwargs.values())):
        return "every number it reads fits in int32"
    return None


def _wide_constant(gm: torch.fx.GraphModule, node: torch.fx.Node) -> int | None:
    if node.op == "get_attr":
        value = getattr(gm, str(node.target), None)
        if isinstance(value, torch.Tensor) and value.dtype == torch.int64 and value.numel():
            low, high = int(value.min()), int(value.max())
            return low if low < INT32.min else high if high > INT32.max else None
        return None
    if check(node) is not None:
        return None
    return next(arg for arg in (*node.args, *node.kwargs.values()) if _wide(arg))


def _reads_int64(node: torch.fx.Node) -> bool:
    values = [node.meta.get("val")] + [arg.meta.get("val") for arg in node.all_input_nodes]
    return any(isinstance(v, torch.Tensor) and v.dtype == torch.int64 for v in values)


def _wide(arg: object) -> bool:
    return type(arg) is int and not INT32.min <= arg <= INT32.max
