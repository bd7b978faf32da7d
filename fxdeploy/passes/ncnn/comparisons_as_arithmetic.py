"""Spell a float comparison read as a 0/1 float mask with arithmetic that ncnn has layers for.

CenterNet's peak extraction keeps a heatmap's local maxima:

    hmax = F.max_pool2d(heat, 3, 1, 1); keep = (hmax == heat).float(); heat = heat * keep

pnnx writes ``torch.eq`` and ``Tensor.to``, which ncnn has no layers for. For float32 ``a`` and
``b``, a comparison is a sign test of ``a - b``, which ``step(x) = |ceil(clamp(x, 0, 1))|`` reads:
1 where ``x > 0``, +0 where ``x <= 0`` (the clamp leaves 0 or a value in (0, 1], the ceil makes
that 1, the abs makes a -0 +0), all layers ncnn has (Clip, UnaryOp ceil and abs, BinaryOp):

    a > b    step(a - b)          a < b    step(b - a)          a != b   step(|a - b|)
    a >= b   1 - step(b - a)      a <= b   1 - step(a - b)      a == b   1 - step(|a - b|)

Exact, bit for bit, wherever ``a - b`` is not NaN: with gradual underflow (subnormals, as PyTorch
computes) ``a - b`` is zero exactly when ``a == b`` (+0 and -0 included), and otherwise has the sign
of the exact difference (rounding never makes it zero or flips it; an overflow gives an infinity
of the right sign). ``a - b`` is NaN where an operand is NaN or both are the same infinity, so the
rewrite fires only where one operand is never infinite (``value_bounds``: a finite number or
constant, a sigmoid, a clamp, pooling of those...); a NaN operand is the one case left, where
PyTorch's comparison is False and this is NaN. ncnn itself flushes subnormals to zero, so on the
engine two values closer than 2**-126 compare equal; PyTorch's rewritten graph does not.

Fires where every reader of the comparison takes it as float32 numbers: a cast to float32
(``.float()``, ``.to(x)``) or a product with float32 values (which reads a bool as 0 and 1), or
bool logic whose own readers do: ``&``/``*`` of two such masks is their product, ``|`` their
maximum, ``^`` the absolute difference and ``~`` one minus the mask, exact on 0s and 1s. That is
YOLO-seg's box crop, ``masks * ((r >= x1) * (r < x2) * (c >= y1) * (c < y2))``. Reductions of such
masks read so are the same reductions of the 0/1 floats: ``amax`` and ``amin`` (``any`` and ``all``,
as ``composite_ops`` spells them) exactly, ``sum`` (``count_nonzero``, int64) exactly below 2**24
elements, where float32 counts every integer. Otherwise (a ``where``, an index, a bool output) it is
left with the reason: the host runs it.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import call_site, fill_meta
from fxdeploy.passes.value_bounds import operand_bound, value_bounds
from fxdeploy.settings import Settings

logger = logging.getLogger(__name__)
aten = torch.ops.aten
Node = torch.fx.Node

_CASTS = frozenset({aten._to_copy.default, aten.to.dtype, aten.to.dtype_layout, aten.type_as.default})
"""Casts: one to float32 on the same device reads the bool as 0 and 1."""
_FORMS = {  # comparison -> (which difference, negated)
    aten.gt: ("a - b", False), aten.lt: ("b - a", False), aten.ne: ("|a - b|", False),
    aten.ge: ("b - a", True), aten.le: ("a - b", True), aten.eq: ("|a - b|", True),
}


_LOGIC = {  # bool logic of two 0/1 masks (one, for not) -> its float spelling
    aten.logical_and.default: aten.mul.Tensor, aten.bitwise_and.Tensor: aten.mul.Tensor,
    aten.mul.Tensor: aten.mul.Tensor, aten.logical_or.default: aten.maximum.default,
    aten.bitwise_or.Tensor: aten.maximum.default, aten.logical_xor.default: aten.sub.Tensor,
    aten.bitwise_xor.Tensor: aten.sub.Tensor, aten.logical_not.default: aten.rsub.Scalar,
    aten.bitwise_not.default: aten.rsub.Scalar, aten.__and__.Tensor: aten.mul.Tensor,
    aten.__or__.Tensor: aten.maximum.default, aten.__xor__.Tensor: aten.sub.Tensor,
}

_REDUCTIONS = frozenset({aten.amax.default, aten.amin.default, aten.sum.dim_IntList, aten.sum.default})
"""Reductions of a mask: the same reduction of its 0/1 float spelling."""


def comparisons_as_arithmetic(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    masks = _spellable(gm)
    spelled: dict[Node, Node] = {}
    for node in list(gm.graph.nodes):
        if node not in masks:
            continue
        before = set(gm.graph.nodes)
        with gm.graph.inserting_before(node):
            spelled[node] = _spelled(gm.graph, node, spelled)
        fill_meta([n for n in gm.graph.nodes if n not in before])
    for node, mask in spelled.items():
        for user in list(node.users):
            if user in spelled:
                continue
            if user.target in _CASTS:
                user.replace_all_uses_with(mask)
                gm.graph.erase_node(user)
            else:
                user.replace_input_with(node, mask)
    for node in reversed(list(spelled)):
        gm.graph.erase_node(node)
    return PassResult(gm, bool(spelled))  # run_pipeline lints and recompiles a modified graph


def _spellable(gm: torch.fx.GraphModule) -> list[Node]:
    """The comparisons, and the bool logic of them, whose every reader takes 0/1 float32 numbers,
    in graph order; each comparison left is logged with the reason."""
    bounds: dict[Node, float] | None = None
    found: dict[Node, str | None] = {}  # node -> why it stays (None: spelled so far)
    for node in gm.graph.nodes:
        packet = getattr(node.target, "overloadpacket", None) if node.op == "call_function" else None
        if packet in _FORMS:
            bounds = value_bounds(gm) if bounds is None else bounds
            found[node] = check(node, bounds) or (None if node.users else "nothing reads it")
        elif _is_logic(node, found) or _is_reduction(node, found):
            found[node] = None
    changed = True
    while changed:  # a node read by one that stays stays too
        changed = False
        for node in [n for n, reason in found.items() if reason is None]:
            kept = next((a for a in node.args if isinstance(a, Node) and found.get(a) is not None), None)
            if kept is not None and _derived(node):  # logic of a comparison that stays stays bool
                found[node], changed = f"its operand {kept.name} stays bool: {found[kept]}", True
                continue
            bad = next((u for u in node.users if found.get(u, "") is not None and _reader(node, u) is not None), None)
            if bad is not None:
                why = f"stays bool: {found[bad]}" if bad in found else _reader(node, bad)
                found[node], changed = f"{bad.format_node()} {why}", True
    for node, reason in found.items():
        if reason is not None and not _derived(node):
            logger.debug("comparisons_as_arithmetic: %s stays a %s: %s", call_site(node), node.target, reason)
    return [node for node, reason in found.items() if reason is None]


def _is_logic(node: Node, found: dict[Node, str | None]) -> bool:
    """Bool logic of comparisons (or of logic of them), every operand one."""
    if node.op != "call_function" or node.target not in _LOGIC:
        return False
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor) or value.dtype != torch.bool:
        return False
    operands = node.args[:1] if node.target in (aten.logical_not.default, aten.bitwise_not.default) else node.args[:2]
    return len(node.args) == len(operands) and not node.kwargs and all(a in found for a in operands)


def _is_reduction(node: Node, found: dict[Node, str | None]) -> bool:
    """A max, min or sum of a comparison (or of logic of them), in its own dtype."""
    if node.op != "call_function" or node.target not in _REDUCTIONS or node.kwargs or node.args[0] not in found:
        return False
    value = node.meta.get("val")
    dtype = torch.int64 if node.target in (aten.sum.dim_IntList, aten.sum.default) else torch.bool
    return isinstance(value, torch.Tensor) and value.dtype == dtype


def _derived(node: Node) -> bool:
    """Logic or a reduction: made from masks, rather than a comparison."""
    return node.target in _LOGIC or node.target in _REDUCTIONS


def check(node: Node, bounds: dict[Node, float]) -> str | None:
    """None when ``node`` compares float32 operands this spells exactly; else why not."""
    a, b = node.args[0], node.args[1]
    if not _is_float32(a) or not (_is_float32(b) or isinstance(b, int | float) and not isinstance(b, bool)):
        return "its operands are not float32 tensors (or a float32 tensor and a number)"
    if operand_bound(a, bounds) is None and operand_bound(b, bounds) is None:
        return ("neither operand is known to be finite (an infinity minus itself is NaN): compare with a "
                "number, or a sigmoid or clamp of the value")
    return None


def _reader(node: Node, user: Node) -> str | None:
    """None when ``user`` reads the comparison as float32 0s and 1s."""
    if user.op == "call_function" and user.target in _CASTS:
        value, mask = user.meta.get("val"), node.meta.get("val")
        float32 = isinstance(value, torch.Tensor) and value.dtype == torch.float32
        here = isinstance(mask, torch.Tensor) and float32 and value.device == mask.device
        return None if here and user.args[0] is node else "casts it to another dtype or device"
    if user.op == "call_function" and user.target is aten.mul.Tensor:
        other = user.args[1] if user.args[0] is node else user.args[0]
        value = user.meta.get("val")
        float32 = isinstance(value, torch.Tensor) and value.dtype == torch.float32
        readable = _is_float32(other) or isinstance(other, int | float) and not isinstance(other, bool)
        return None if float32 and readable and other is not node else "multiplies it with a value that is not float32"
    return "reads it as a bool (only a cast to float32 or a product with float32 values reads 0/1 numbers)"


def _spelled(graph: torch.fx.Graph, node: Node, spelled: dict[Node, Node]) -> Node:
    """The float32 0/1 mask of a comparison, or of bool logic of masks already spelled."""
    if node.target in _REDUCTIONS:
        return graph.call_function(node.target, (spelled[node.args[0]], *node.args[1:]))
    if node.target not in _LOGIC:
        packet = node.target.overloadpacket
        return _mask(graph, node, *_FORMS[packet])
    args = [spelled[a] for a in node.args]
    target = _LOGIC[node.target]
    if target is aten.rsub.Scalar:
        return graph.call_function(target, (args[0], 1.0))
    if target is aten.sub.Tensor:
        return graph.call_function(aten.abs.default, (graph.call_function(target, tuple(args)),))
    return graph.call_function(target, tuple(args))


def _is_float32(value: Any) -> bool:
    return isinstance(value, Node) and isinstance(value.meta.get("val"), torch.Tensor) and \
        value.meta["val"].dtype == torch.float32


def _mask(graph: torch.fx.Graph, node: Node, difference: str, negated: bool) -> Node:
    """The float32 0/1 mask equal to the comparison (see the module docstring)."""
    a, b = node.args[0], node.args[1]
    if difference == "b - a":
        diff = graph.call_function(aten.rsub.Scalar if not isinstance(b, Node) else aten.sub.Tensor,
                                   (a, b) if not isinstance(b, Node) else (b, a))
    else:
        diff = graph.call_function(aten.sub.Tensor, (a, b))
        if difference == "|a - b|":
            diff = graph.call_function(aten.abs.default, (diff,))
    clamped = graph.call_function(aten.clamp.default, (diff, 0.0, 1.0))
    step = graph.call_function(aten.ceil.default, (clamped,))
    if negated:  # 1 - step is +0 or 1 whatever the sign of step's zero
        return graph.call_function(aten.rsub.Scalar, (step, 1.0))
    return graph.call_function(aten.abs.default, (step,))
