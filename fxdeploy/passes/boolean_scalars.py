"""A boolean result computed with a Python bool as its number operand is cast back to bool.

torch keeps ``torch.where(valid, mask, False)``, ``torch.where(m, True, False)``, ``mask & True``
and ``mask + True`` boolean: a bool number does not widen a bool tensor. TorchScript has no bool
``Scalar``: it reads the literal as the int 1 or 0, so the scripted op promotes to int64 and the
artifact returned ``[[0, 1, 1]]`` (int64) where eager returns ``[[False, True, True]]``, and
``mask + True`` gave 2. lower()'s check compared the values, 0 and 1 against False and True, and
passed; the user's ``~mask`` then gave -1 and -2, and ``x[mask]`` indexed rows instead of masking.

The op's values as int64 are 0 or 1 where torch's are False or True (``where`` picks one of them,
``&``, ``|``, ``^`` keep them, and ``+``, torch's ``or`` of bools, is nonzero exactly where that is
True), so a cast to bool after it gives eager's result. Comparisons return bool in TorchScript too
and stay as they are.
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import fill_meta
from fxdeploy.settings import Settings

aten = torch.ops.aten
COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})


def boolean_scalars(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if check(node) is not None:
            continue
        with gm.graph.inserting_after(node):
            cast = gm.graph.call_function(aten._to_copy.default, (node,), {"dtype": torch.bool})
        node.replace_all_uses_with(cast)
        cast.args = (node,)  # the cast itself was a use
        fill_meta([cast])
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def check(node: torch.fx.Node) -> str | None:
    """None where ``node`` gives a bool tensor from a Python bool operand, which TorchScript reads
    as an int; else why not."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return "not an aten op"
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor) or value.dtype != torch.bool:
        return "its result is not a bool tensor"
    if node.target.overloadpacket.__name__.strip("_") in COMPARISONS:
        return "a comparison, which returns bool in TorchScript too"
    if not any(isinstance(value, bool) for value in _operands(node)):
        return "no Python bool as an operand"
    return None


def _operands(node: torch.fx.Node) -> list[object]:
    """The values given to the arguments the op's schema types as ``Scalar`` or ``Tensor`` (``mask +
    True`` is ``add.Tensor`` with a literal, which TorchScript resolves to ``add.Scalar``); not
    flags such as ``keepdim``, which are ``bool`` in the schema."""
    values = []
    for index, argument in enumerate(node.target._schema.arguments):
        if not isinstance(argument.type, (torch.NumberType, torch.TensorType)):
            continue
        if argument.kwarg_only or index >= len(node.args):
            values.append(node.kwargs.get(argument.name))
        else:
            values.append(node.args[index])
    return values
