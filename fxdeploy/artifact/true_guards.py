"""Guards torch.export cannot prove but that hold at every size of the declared range.

A ceil-mode pool's output size is ``(h + 2p - k + s - 1) // s + 1``, less one where the last
window would start past the padding: torch's meta function guards on ``(out - 1) * s >= h + p``.
With ``k = s = 2`` and no padding that guard is ``2*((h - 1) // 2) < h``, true for every ``h``,
but sympy cannot prove it, so torch.export reports "Constraints violated" and suggests
``h = 2*_h``. Applying that fix (``fixes``) would make the artifact refuse every odd size.

Here such a guard is proven over the declared range, exactly: it is built from one size, integer
constants, ``+``, ``-``, ``*`` by a constant, and ``//`` and ``%`` by a positive constant. With
``L`` the product of its divisors, every such term is affine in ``q`` on each residue class
``h = L*q + r``, so a comparison of two of them holds over a class's sizes in the range where it
holds at the first and the last (and, for ``!=``, both sides differ the same way). Any other guard
of the declared size, integer constants, those operators and ``min``/``max`` (torch 2.11 leaves
``min(L, 2*L) == L`` unproven) is evaluated at each size of a range of at most ``EXHAUSTIVE``. Where every
violation torch reports is such a guard, capture exports again with the guards kept as runtime
asserts (``prefer_deferred_runtime_asserts_over_guards``): they are true at every size it admits.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

from fxdeploy.artifact.dims import INT_MAX, finite_or

MAX_PERIOD = 4096  # residue classes checked per guard; a guard with a longer period keeps torch's fix
EXHAUSTIVE = 1 << 14  # sizes a guard of another form is evaluated at; over a wider range torch's fix stands

_VIOLATION = re.compile(r"^\s*- Not all values of (?P<name>\w+) = (?P<source>\S+) in the specified range .*? "
                        r"satisfy the generated guard (?P<guard>.+?)\.?\s*$")
_COMPARE: dict[type, Callable[[int, int], bool]] = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Eq: operator.eq,
}
_CALLS: dict[str, Callable[..., int]] = {"min": min, "max": max}
_ARITHMETIC: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
}


def all_hold(exc: BaseException | None, shapes: Any) -> bool:
    """Whether ``exc`` is torch.export's "Constraints violated" and each violation it lists is a
    guard on one dim declared in ``shapes`` (torch.export's dynamic_shapes) that holds at every
    size of its declared range."""
    text = str(exc) if exc is not None else ""
    if "Constraints violated" not in text:
        return False
    dims = {dim.__name__: dim for dim in declared(shapes)}
    listed = [line for line in text.splitlines() if line.lstrip().startswith("- ")]
    for line in listed:
        match = _VIOLATION.match(line)
        if match is None or match["name"] not in dims:
            return False
        dim = dims[match["name"]]
        low, high = getattr(dim, "min", 0), finite_or(getattr(dim, "max", INT_MAX), INT_MAX)
        if not holds(match["guard"].replace(match["source"], "size"), low, high):
            return False
    return bool(listed)


def declared(shapes: Any) -> list[Any]:
    """The Dims of torch.export's ``dynamic_shapes``; a derived dim's (``20*_samples``) root."""
    if isinstance(shapes, Mapping):
        return [d for v in shapes.values() for d in declared(v)]
    if isinstance(shapes, list | tuple):
        return [d for v in shapes for d in declared(v)]
    if hasattr(shapes, "root"):
        return [shapes.root]
    if shapes is not None and hasattr(shapes, "__name__"):
        return [shapes]
    return []


def holds(guard: str, low: int, high: int) -> bool:
    """Whether ``guard``, Python over the one name ``size``, is true for every size in [low, high];
    False where it is not, or is not of the affine form above."""
    try:
        tree = ast.parse(guard, mode="eval").body
    except SyntaxError:
        return False
    comparisons = tree.values if isinstance(tree, ast.BoolOp) and isinstance(tree.op, ast.And) else [tree]
    return all(_compare_holds(c, low, high) or _holds_at_each_size(c, low, high) for c in comparisons)


def _holds_at_each_size(node: ast.expr, low: int, high: int) -> bool:
    """Where the range has at most ``EXHAUSTIVE`` sizes, whether ``node`` is true at each one."""
    if high - low >= EXHAUSTIVE or not isinstance(node, ast.Compare) or len(node.ops) != 1:
        return False
    op, left, right = type(node.ops[0]), node.left, node.comparators[0]
    if (op not in _COMPARE and op is not ast.NotEq) or not (_evaluable(left) and _evaluable(right)):
        return False
    compare = _COMPARE.get(op, operator.ne)
    try:
        return all(compare(_value(left, size), _value(right, size)) for size in range(low, high + 1))
    except ZeroDivisionError:
        return False


def _evaluable(node: ast.expr) -> bool:
    """Whether ``node`` is built from ``size``, integer constants, ``+ - * // %`` and ``min``/``max``."""
    if isinstance(node, ast.Call):
        return (isinstance(node.func, ast.Name) and node.func.id in _CALLS and bool(node.args)
                and not node.keywords and all(_evaluable(a) for a in node.args))
    if isinstance(node, ast.BinOp):
        return type(node.op) in _ARITHMETIC and _evaluable(node.left) and _evaluable(node.right)
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.op, ast.USub | ast.UAdd) and _evaluable(node.operand)
    return _affine(node, [])


def _compare_holds(node: ast.expr, low: int, high: int) -> bool:
    if not isinstance(node, ast.Compare) or len(node.ops) != 1:
        return False
    op, left, right = type(node.ops[0]), node.left, node.comparators[0]
    divisors: list[int] = []
    if (op not in _COMPARE and op is not ast.NotEq) or not (_affine(left, divisors) and _affine(right, divisors)):
        return False
    period = math.prod(divisors)
    if period > MAX_PERIOD:
        return False
    for residue in range(period):
        first, last = low + (residue - low) % period, high - (high - residue) % period
        if first > high:
            continue
        ends = [_value(left, size) - _value(right, size) for size in (first, last)]
        if op is ast.NotEq:
            if not (all(d > 0 for d in ends) or all(d < 0 for d in ends)):
                return False
        elif not all(_COMPARE[op](d, 0) for d in ends):
            return False
    return True


def _affine(node: ast.expr, divisors: list[int]) -> bool:
    """Whether ``node`` is affine in ``size`` on each residue class of the product of its divisors
    (collected into ``divisors``)."""
    if isinstance(node, ast.Name):
        return node.id == "size"
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.op, ast.USub | ast.UAdd) and _affine(node.operand, divisors)
    if not isinstance(node, ast.BinOp) or type(node.op) not in _ARITHMETIC:
        return False
    if isinstance(node.op, ast.FloorDiv | ast.Mod):
        divisor = _constant(node.right)
        if divisor is None or divisor <= 0:
            return False
        divisors.append(divisor)
        return _affine(node.left, divisors)
    if isinstance(node.op, ast.Mult) and _constant(node.left) is None and _constant(node.right) is None:
        return False  # a product of two sizes is not affine
    return _affine(node.left, divisors) and _affine(node.right, divisors)


def _constant(node: ast.expr) -> int | None:
    """The integer ``node`` is, where it holds no size."""
    if any(isinstance(n, ast.Name) for n in ast.walk(node)) or not _affine(node, []):
        return None
    return _value(node, 0)


def _value(node: ast.expr, size: int) -> int:
    """``node`` at ``size``, in Python's integer arithmetic (``//`` floors, as torch's FloorDiv)."""
    if isinstance(node, ast.Name):
        return size
    if isinstance(node, ast.Constant):
        return int(node.value)
    if isinstance(node, ast.UnaryOp):
        value = _value(node.operand, size)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Call):
        return _CALLS[node.func.id](*(_value(a, size) for a in node.args))  # type: ignore[attr-defined]
    assert isinstance(node, ast.BinOp)
    return _ARITHMETIC[type(node.op)](_value(node.left, size), _value(node.right, size))
