"""Half values that a comparison reads, rounded to half in float32 arithmetic, for ONNX Runtime and OpenVINO.

A model that computes in half itself (``(x.half() * 3 > y.half()).float()``) rounds every half op's
result to 11 significant bits in eager. Neither CPU runtime keeps that rounding:
- ONNX Runtime's CPU provider has no f16 kernel for most ops (``Add``, ``Mul``): it computes them in
  f32 between casts it inserts, then removes each ``Cast`` f32 -> f16 -> f32 pair, the model's own
  included, with graph optimizations off too (onnxruntime 1.32: ``half(0.1) + half(0.3)`` gave
  0.4000000059604645, eager 0.39990234375);
- OpenVINO's CPU plugin (this CPU has no f16 arithmetic; ``INFERENCE_PRECISION_HINT`` f32) turns
  every f16 type into f32 at compile time, so ``Cast(f32 -> f16)`` becomes a no-op and goes.
Values then differ by less than a half ulp (within the check's tolerance), but a comparison of
them flips: ``x.half() * 3 > y.half()`` at ``x = 0.1, y = 0.3`` is False in eager (the product
rounds to 0.2998046875), True on OpenVINO.

The rounding is spelt in float32 ops that both keep (``round_to_half``: a power-of-two scale,
a round half to even, the scale back): in torch's semantics the value already is a half, so the
rewrite is the identity, and the translation-validation harness checks it so. Which values: every
half value a comparison is computed from (in half, or after a conversion to float32); a value made
by an op that only moves or selects half values (a view, a ``cat``, a ``where``, ``max``) is a half
already where its inputs are. The float32 result of ``+ - * /`` and ``sqrt`` of halves rounded to
half is the half op's result (float32 has over twice half's precision), so rounding after each such
op gives eager's values, ops of several steps included. A model computing wholly in half at fp32
settings pays about 30 elementwise ops per rounded value (``precision="fp16"`` is the fast path).

Only at ``precision="fp32"``: with ``fp16`` the precision policy changes dtypes on purpose, and its
tolerance is the contract. bfloat16 is left as it is (OpenVINO's rounding of it is not measured).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import fill_meta
from fxdeploy.passes.half_comparison_scalars import SCALAR, TENSOR
from fxdeploy.settings import Settings

aten = torch.ops.aten
Call = Callable[..., Any]
HALF_MAX_ROUNDING = 65520.0
"""The smallest float that rounds to infinity in half (halfway between 65504 and 2**16)."""
MOVES = frozenset({
    "aten.view.default", "aten.reshape.default", "aten._unsafe_view.default", "aten.permute.default",
    "aten.transpose.int", "aten.t.default", "aten.expand.default", "aten.squeeze.dim", "aten.squeeze.dims",
    "aten.squeeze.default",
    "aten.unsqueeze.default", "aten.slice.Tensor", "aten.select.int", "aten.clone.default", "aten.cat.default",
    "aten.stack.default", "aten.index_select.default", "aten.gather.default", "aten.alias.default",
    "aten.neg.default", "aten.abs.default", "aten.relu.default", "aten.where.self", "aten.maximum.default",
    "aten.minimum.default", "aten.amax.default", "aten.amin.default", "aten.flatten.using_ints",
    "aten.max_pool2d.default",
})
"""Ops whose half output is one of their half inputs' values: rounded where their inputs are. (Any
other op is rounded after: an extra rounding of a half is the identity, and rounding is monotonic,
so a ``max.dim``'s values rounded are the max of its input rounded.)"""


def half_rounding(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    if settings.precision != "fp32":
        return PassResult(gm, False)
    cone = _rounded_values(gm)
    for node in cone:
        _round_after(gm, node)
    return PassResult(gm, bool(cone))  # run_pipeline lints and recompiles a modified graph


def check(node: torch.fx.Node) -> str | None:
    """None where ``node``'s half value is computed (not moved) and so is rounded by eager and not
    by OpenVINO; else why it needs no rounding of its own."""
    if not _is_half(node):
        return "not a half value"
    if node.op != "call_function":
        return "a graph input or constant: a half already, OpenVINO converts it to f32 exactly"
    if _name(node) in MOVES:
        return f"{_name(node)} moves half values: they are rounded where its inputs are"
    return None


def round_to_half(f: Any, call: Call = lambda target, *args, **kwargs: target(*args, **kwargs)) -> Any:
    """``f.half().float()`` in float32 ops, each made by ``call`` (run here, or a node of a graph):
    exact for every float32 (NaN, infinities, subnormals).

    The half ulp of ``|f|`` is ``q = 2**(e - 10)`` for a normal half (``e`` its exponent) and 2**-24
    below 2**-14; five halving steps find ``e`` (a power-of-two scale is exact). ``f / q`` is then
    exact, ``round`` rounds half to even as the conversion does, ``* q`` is exact, and ``|f| >=
    65520`` is an infinity of ``f``'s sign. NaN fails every comparison and stays NaN.
    """
    a = call(aten.abs.default, f)
    s, q = a, None
    for k in (16, 8, 4, 2, 1):
        big = call(aten.ge.Scalar, s, 2.0 ** (k - 14))
        s = call(aten.where.self, big, call(aten.mul.Tensor, s, 2.0**-k), s)
        q = (call(aten.where.Scalar, big, 2.0 ** (k - 24), 2.0**-24) if q is None
             else call(aten.where.self, big, call(aten.mul.Tensor, q, 2.0**k), q))
    kept = call(aten.mul.Tensor, call(aten.round.default, call(aten.div.Tensor, f, q)), q)
    infinite = call(aten.mul.Tensor, f, float("inf"))
    return call(aten.where.self, call(aten.ge.Scalar, a, HALF_MAX_ROUNDING), infinite, kept)


def _rounded_values(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The half values to round: those ``check`` accepts among everything a comparison is computed
    from (``(x.half() * 3).float() > y`` compares eager's rounded product in float32)."""
    stack = [a for n in gm.graph.nodes if n.op == "call_function" and n.target in SCALAR | TENSOR
             for a in n.all_input_nodes]
    seen: set[torch.fx.Node] = set()
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(node.all_input_nodes)
    return [n for n in gm.graph.nodes if n in seen and check(n) is None]


def _round_after(gm: torch.fx.GraphModule, node: torch.fx.Node) -> None:
    users = list(node.users)
    new: list[torch.fx.Node] = []

    def call(target: Any, *args: Any, **kwargs: Any) -> torch.fx.Node:
        new.append(gm.graph.call_function(target, args, kwargs))
        return new[-1]

    with gm.graph.inserting_before(node.next):
        start = call(aten._to_copy.default, node, dtype=torch.float32)
        call(aten._to_copy.default, round_to_half(start, call), dtype=torch.float16)
    fill_meta(new)
    for user in users:
        user.replace_input_with(node, new[-1])


def _is_half(node: object) -> bool:
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return isinstance(value, torch.Tensor) and value.dtype == torch.float16


def _name(node: torch.fx.Node) -> str:
    target = node.target
    return str(target).removeprefix("torch.ops.") if isinstance(target, torch._ops.OpOverload) else (
        f"{getattr(target, '__module__', '')}.{getattr(target, '__name__', target)}")
