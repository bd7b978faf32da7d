"""A max over a window the model can fill with -inf gives -inf where the window holds only -inf;
a min over a row it can fill with +inf gives +inf where the row holds only +inf.

``x.masked_fill(mask, -inf)`` then a max pool or an ``amax`` is -inf in eager over a window (or row)
masked whole; the runtimes start their max from the lowest finite float, not -inf, and give
-3.4028235e38 there: ONNX Runtime's MaxPool with pads (padding, or ``ceil_mode``'s partial
windows), OpenVINO's MaxPool and ReduceMax (``amax``, ``max(dim)``, ``max()``), padded or not. A
later ``where(isinf(m), 0, m)`` guard then lets the wrong value through. The same with +inf and a
min (``masked_fill(mask, inf).amin(-1)``, a nearest distance over valid entries only): OpenVINO's
ReduceMin gives 3.4028235e38 for a row of +inf only.

Rewritten: ``y = max(x)`` becomes ``where(max(x != -inf) == 0, -inf, y)``, the indicator's max taken
over the same windows (same kernel, stride, padding, dilation, ceil mode; same dims). The indicator
is 0 or 1 at every element, so its max is 0 exactly where every element of the window is -inf,
which is where eager's max is -inf, and the rewrite gives -inf there; anywhere else it is 1 and the
runtime's ``y`` is kept as it was. A min: ``where(max(x != inf) == 0, inf, y)`` over its dims.
Padding: a pad position is never the max of a window that holds an element (torch pads max pools
with -inf; a runtime pads the indicator with 0 or the lowest float, neither above 0), and torch
allows no window of padding only. NaN: ``NaN != -inf`` is 1, so a window with a NaN keeps the
runtime's value, as without the rewrite. In torch it is the identity.

Only where the max's input can hold -inf made in the graph (``may_hold_inf``): an infinite number
in the model's code (a ``masked_fill``, ``where``, ``full`` or pad value), a constant holding -inf,
or an op that makes -inf of finite values (``log`` of 0, a division by 0), and what elementwise ops
and views make of them. Ops whose value is never -inf end that (``relu``, ``exp``, ``sigmoid``,
``silu``, a softmax, a comparison), so a CNN's max pool after its activation (YOLO's SPPF) is left as
it is. A min's input is followed for an infinity of either sign (a negation turns one into the
other), and only bounded ops (``sigmoid``, ``tanh``, a softmax, a clamp on both sides) end it. Model
inputs and float overflow count as finite: the ordinary inputs this is about.
"""

from __future__ import annotations

import math
import operator

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import fill_meta
from fxdeploy.settings import Settings

aten = torch.ops.aten
POOLS = frozenset({aten.max_pool1d.default, aten.max_pool2d.default, aten.max_pool3d.default,
                   aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default})
REDUCTIONS = frozenset({aten.amax.default, aten.max.dim, aten.max.default})
MINIMA = frozenset({aten.amin.default, aten.min.dim, aten.min.default})
WITH_INDICES = frozenset({aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default, aten.max.dim,
                          aten.min.dim})
MAKES_NEG_INF = frozenset({
    "log", "log2", "log10", "log1p", "log_softmax", "_log_softmax", "logit", "xlogy", "reciprocal", "rsqrt",
    "atanh", "erfinv", "special_ndtri", "digamma", "polygamma", "special_log_ndtr",
})
"""Ops that make -inf of finite values (``log(0)``, ``rsqrt(-0.0)``, ``atanh(-1)``); a division and
a power are among them unless their divisor or exponent says otherwise (``_makes_neg_inf``)."""
NEVER_NEG_INF = frozenset({
    "relu", "relu6", "sigmoid", "exp", "exp2", "softmax", "_softmax", "silu", "gelu", "hardswish",
    "hardsigmoid", "tanh", "elu", "abs", "sqrt", "cos", "sin", "erf", "softplus",
    "isinf", "isnan", "isfinite", "isneginf", "isposinf", "sign", "square",
})
"""Ops whose value is never -inf, whatever they read (NaN at worst: ``silu(-inf)``, ``sqrt(-1)``)."""
NEVER_INFINITE = frozenset({
    "sigmoid", "tanh", "softmax", "_softmax", "cos", "sin", "erf", "hardsigmoid", "relu6",
    "isinf", "isnan", "isfinite", "isneginf", "isposinf", "sign",
})
"""Ops whose value is bounded, whatever they read: never +inf or -inf."""


def infinite_windows(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    holds = infinities(gm)
    modified = False
    for node in list(gm.graph.nodes):
        if check(node, holds) is None:
            _guard(gm, node)
            modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def check(node: torch.fx.Node, holds: dict[int, set[torch.fx.Node]]) -> str | None:
    """None where ``node`` is a max (pool or reduction) whose input the graph can fill with -inf, or
    a min reduction whose input it can fill with +inf (``holds``: ``infinities``)."""
    if node.op != "call_function" or node.target not in POOLS | REDUCTIONS | MINIMA:
        return "not a max pool, max reduction or min reduction"
    x = node.args[0]
    value = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        return "its input is not a float tensor"
    if node.target in MINIMA and x not in holds[0]:
        return "no infinity reaches its input: no infinite number or constant, or op making one, is behind it"
    if node.target not in MINIMA and x not in holds[-1]:
        return "no -inf reaches its input: no infinite number, -inf constant or op making -inf is behind it"
    if node.target in WITH_INDICES and not any(_item(u) == 0 for u in node.users):
        return "its values are not read"
    return None


def infinities(gm: torch.fx.GraphModule) -> dict[int, set[torch.fx.Node]]:
    """``may_hold_inf`` for -inf (-1) and for either infinity (0), as ``check`` reads them."""
    return {-1: may_hold_inf(gm, -1), 0: may_hold_inf(gm, 0)}


def may_hold_inf(gm: torch.fx.GraphModule, sign: int) -> set[torch.fx.Node]:
    """The float nodes whose value can be -inf (``sign`` -1), or an infinity of either sign (0), for
    finite inputs, in one pass in graph order."""
    never, infinite = (NEVER_NEG_INF, torch.isneginf) if sign < 0 else (NEVER_INFINITE, torch.isinf)
    holds: set[torch.fx.Node] = set()
    for node in gm.graph.nodes:
        value = node.meta.get("val")
        floating = value is None or isinstance(value, torch.Tensor) and value.is_floating_point()  # None: unknown
        if isinstance(value, (tuple, list)):  # max.dim, max_pool_with_indices: the values carry it
            floating = any(isinstance(v, torch.Tensor) and v.is_floating_point() for v in value)
        if not floating or node.op in ("placeholder", "output"):
            continue
        if node.op == "get_attr":
            held = _attribute(gm, node)
            if not isinstance(held, torch.Tensor) or held.is_meta or bool(infinite(held).any()):
                holds.add(node)  # unknown or data-less: it may hold one
            continue
        name = node.target.__name__.split(".")[0] if hasattr(node.target, "__name__") else str(node.target)
        if name in never or _finite_bound(name, node, sign):
            continue
        if (_makes_inf(gm, name, node, sign) or _infinite_number(node.args) or _infinite_number(node.kwargs)
                or any(a in holds for a in node.all_input_nodes)):
            holds.add(node)
    return holds


def _guard(gm: torch.fx.GraphModule, node: torch.fx.Node) -> None:
    """``where(max(x != fill) == 0, fill, y)`` after ``node``, read by its users instead of ``y``;
    ``fill`` is -inf for a max, +inf for a min, whose indicator takes the max over the same dims."""
    x, rest = node.args[0], node.args[1:]
    fill = float("inf") if node.target in MINIMA else float("-inf")
    new: list[torch.fx.Node] = []

    def call(target: object, *args: object, **kwargs: object) -> torch.fx.Node:
        new.append(gm.graph.call_function(target, args, kwargs))
        return new[-1]

    values = [u for u in node.users if _item(u) == 0] if node.target in WITH_INDICES else [node]
    for y in values:
        users = list(y.users)
        with gm.graph.inserting_before(y.next):
            indicator = call(aten._to_copy.default, call(aten.ne.Scalar, x, fill), dtype=x.meta["val"].dtype)
            if node.target in (aten.max.dim, aten.min.dim):
                pooled = call(aten.amax.default, indicator, [rest[0]], *rest[1:2], **node.kwargs)
            else:
                target = {aten.amin.default: aten.amax.default, aten.min.default: aten.max.default}.get(node.target)
                pooled = call(target or node.target, indicator, *rest, **node.kwargs)
                pooled = call(operator.getitem, pooled, 0) if node.target in WITH_INDICES else pooled
            guarded = call(aten.where.ScalarSelf, call(aten.eq.Scalar, pooled, 0.0), fill, y)
        fill_meta(new)
        new.clear()
        for user in users:
            user.replace_input_with(y, guarded)


def _item(node: torch.fx.Node) -> int | None:
    return node.args[1] if node.op == "call_function" and node.target is operator.getitem else None


def _finite_bound(name: str, node: torch.fx.Node, sign: int) -> bool:
    """A clamp from below by a finite number: never -inf; from both sides: never infinite."""
    if name not in ("clamp", "clamp_min", "hardtanh"):
        return False
    low = node.args[1] if len(node.args) > 1 else node.kwargs.get("min", -1.0 if name == "hardtanh" else None)
    high = node.args[2] if len(node.args) > 2 else node.kwargs.get("max", 1.0 if name == "hardtanh" else None)
    return all(isinstance(b, (int, float)) and math.isfinite(b) for b in ((low,) if sign < 0 else (low, high)))


def _makes_inf(gm: torch.fx.GraphModule, name: str, node: torch.fx.Node, sign: int) -> bool:
    """``name`` makes -inf (``sign`` -1) or either infinity (0) of finite values: a division unless by
    a nonzero number or a constant without a zero, a power unless by a number at least 0."""
    if name in ("div", "floor_divide", "true_divide", "remainder", "fmod"):
        divisor = node.args[1] if len(node.args) > 1 else None
        held = _attribute(gm, divisor) if isinstance(divisor, torch.fx.Node) and divisor.op == "get_attr" else None
        if isinstance(divisor, (int, float)):
            return divisor == 0
        return not (isinstance(held, torch.Tensor) and bool((held != 0).all()))
    if name == "pow":
        exponent = node.args[1] if len(node.args) > 1 else None
        return not (isinstance(exponent, (int, float)) and exponent >= 0)
    return name in MAKES_NEG_INF or sign == 0 and name in ("lgamma", "mvlgamma")  # lgamma(0) = +inf


def _infinite_number(args: object) -> bool:
    if isinstance(args, float):
        return math.isinf(args)
    if isinstance(args, (tuple, list)):
        return any(_infinite_number(a) for a in args)
    if isinstance(args, dict):
        return any(_infinite_number(a) for a in args.values())
    return False


def _attribute(gm: torch.fx.GraphModule, node: torch.fx.Node) -> object:
    held: object = gm
    for part in str(node.target).split("."):
        held = getattr(held, part, None)
    return held
