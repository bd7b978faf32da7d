"""A float floor division or remainder on OpenVINO is refused, naming the line, unless its divisor is
a power of two.

torch divides floats by ``fmod`` first, so ``a // b`` is the floor of the exact quotient and ``a % b``
the exact remainder moved to the divisor's sign. OpenVINO 2026.4 has no exact ``fmod``: its ``Mod`` is
``a - trunc(a / b) * b`` in float32 and its ``Div`` a product with the divisor's rounded reciprocal, so
the OpenVINO flavour of the translation (``fxdeploy/lowering/onnx_translations/division.py``) writes
``Floor(Div(a, b))``, the floor of the *rounded* quotient: ``-7.0 // 0.7`` gave -10 where torch gives -11,
and ``-7.0 % 0.7`` 0.0 where torch gives 0.69999987. lower()'s check refused that only where the
example held such a value; lowered from another, the artifact was silently wrong on it.

Where the divisor is a Python number that is a power of two (``x // 2``, ``x % 0.5``, ``-4.0``), the
quotient ``a * 2**-k`` is exact, so its floor is torch's, and so is ``a - floor(a / b) * b`` (an exact
product, then the one rounding torch's ``fmod(a, b) + b`` makes too); an infinite dividend gives NaN,
as in torch (``division.py``). Any other float divisor is refused, with what to do: ``torch.floor(a / b)``
if the rounded quotient's floor is what the model means (it is what OpenVINO computes), integers,
or a target with an exact ``fmod`` (ONNX Runtime). Integer divisions are exact on every divisor
(``exact_integers.py``) and are not refused.
"""

from __future__ import annotations

import math

import torch

from fxdeploy.errors import LoweringError
from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import call_site
from fxdeploy.settings import Settings

aten = torch.ops.aten
FLOORED = frozenset({aten.floor_divide.default, aten.floor_divide.Scalar, aten.remainder.Tensor,
                     aten.remainder.Scalar, aten.fmod.Tensor, aten.fmod.Scalar})
ROUNDED = frozenset({aten.div.Tensor_mode, aten.div.Scalar_mode})


def float_floor_divisions(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    for node in gm.graph.nodes:
        if check(node) is None:
            raise LoweringError(
                f"{call_site(node)}: {node.target} of floating-point values by {_divisor(node)}: OpenVINO has no exact "
                "fmod, so it computes the floor of the rounded quotient (-7.0 // 0.7 gives -10 there, -11 in torch) "
                "and the artifact would differ from eager at exact multiples of the divisor. Write torch.floor(a / b) "
                "(a - torch.floor(a / b) * b for a remainder) if that is what the model means, divide integers, or "
                "divide by a power of two; or lower for target 'onnxruntime', which computes torch's values"
            )
    return PassResult(gm, False)


def check(node: torch.fx.Node) -> str | None:
    """None where ``node`` is a float floor division, remainder or fmod OpenVINO would get wrong (the
    refusal applies), else why not."""
    if node.op != "call_function" or node.target not in FLOORED | ROUNDED:
        return "not a floor division, remainder or fmod"
    if node.target in ROUNDED and node.kwargs.get("rounding_mode", node.args[2] if len(node.args) > 2 else None) \
            != "floor":
        return "a true or truncating division (OpenVINO's rounded quotient, as torch's)"
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        return "an integer division: exact on OpenVINO (exact_integers.py)"
    divisor = node.args[1]
    if isinstance(divisor, (int, float)) and math.isfinite(divisor) and divisor != 0 \
            and math.frexp(abs(divisor))[0] == 0.5:
        return f"its divisor {divisor} is a power of two: the quotient is exact"
    return None


def _divisor(node: torch.fx.Node) -> str:
    divisor = node.args[1]
    return repr(divisor) if not isinstance(divisor, torch.fx.Node) else f"a tensor ({divisor.name})"
