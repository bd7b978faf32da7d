"""Spell a float raised to the power 2 or 3 as products.

The tanh approximation of GELU (GPT-2's ``gelu_new``, ``F.gelu(x, approximate="tanh")`` as
transformers writes it) computes ``x ** 3``. pnnx writes ncnn's BinaryOp pow, which gives other
values than PyTorch for a negative base (the bisection finds it: "ncnn layer BinaryOp pow_0"),
so the op would run on the host between two engines. PyTorch itself computes these two powers as
products (its optimized ``pow`` of a tensor by the scalar 2 or 3), so the products are its values
bit for bit:

    pow(x, 2) == x * x          pow(x, 3) == x * x * x

Fires on a float32 base with the exponent the number 2 or 3; other exponents stay.
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import fill_meta
from fxdeploy.settings import Settings

aten = torch.ops.aten
_POWERS = (2, 3)


def integer_powers(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if check(node) is not None:
            continue
        base, new = node.args[0], []
        with gm.graph.inserting_before(node):
            product = gm.graph.call_function(aten.mul.Tensor, (base, base))
            new.append(product)
            if node.args[1] == 3:  # noqa: PLR2004 - the cube
                product = gm.graph.call_function(aten.mul.Tensor, (product, base))
                new.append(product)
        fill_meta(new)
        for item in new:
            item.meta["stack_trace"] = node.meta.get("stack_trace")
        node.replace_all_uses_with(product)
        gm.graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def check(node: torch.fx.Node) -> str | None:
    """None when ``node`` is ``pow`` of a float32 tensor by the number 2 or 3; else why not."""
    if node.op != "call_function" or node.target is not aten.pow.Tensor_Scalar:
        return "not a pow of a tensor by a number"
    base = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
    if not isinstance(base, torch.Tensor) or base.dtype != torch.float32:
        return "its base is not a float32 tensor"
    exponent = node.args[1]
    if isinstance(exponent, bool) or exponent not in _POWERS:
        return f"its exponent {exponent!r} is neither 2 nor 3"
    return None
