"""torch.export's guards on the input sizes: kept as data, checked by ``Deployed``, never executed.

A model's code can branch on its input sizes. torch.export then specializes the graph to the
branch the example took and records a guard: DINOv2 at its configured 56 x 56 skips the position
embedding's interpolation, and the graph holds only where ``(x.shape[3] // 14) * (x.shape[2] // 14)
== 16`` and ``x.shape[2] == x.shape[3]``. Elsewhere it computes garbage or crashes inside the
runtime. fxdeploy keeps every guard that reads a dynamic dim, in the manifest, spelt over the
input names (``x.shape[2] == x.shape[3]``), and ``Deployed`` refuses inputs that break one with
an ``InputError`` naming it.

The manifest is data: a guard is parsed into a small arithmetic tree (integers, ``+ - * // %``,
comparisons, ``and``/``or``/``not``, ``name.shape[i]``) and interpreted; anything else in a guard is
refused when the artifact is loaded, and nothing is ever passed to ``eval``.
"""

from __future__ import annotations

import ast
import functools
import logging
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

logger = logging.getLogger(__name__)

_SIZE = re.compile(r"L\['(\w+)'\]\.size\(\)\[(\d+)\]")
_BINARY: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
}
_COMPARE: dict[type, Callable[[int, int], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}
Shapes = Mapping[str, Sequence[int]]


def from_export(guards_code: Sequence[str], inputs: Mapping[str, Sequence[int | str]]) -> list[str]:
    """The guards of ``ExportedProgram._guards_code`` that read a dynamic dim of ``inputs`` (name ->
    manifest shape), spelt over the input names. A guard in another form (a stride, a nested
    input) is left out, with a debug line: the dims' ranges still hold."""
    kept = []
    for code in guards_code:
        spelt = _SIZE.sub(lambda m: f"{m[1]}.shape[{m[2]}]", code)
        try:
            read = _sizes_read(parse(spelt))
        except ValueError as exc:
            logger.debug("guard %r not kept: %s", code, exc)
            continue
        if read and all(name in inputs and axis < len(inputs[name]) for name, axis in read) and any(
            isinstance(inputs[name][axis], str) for name, axis in read
        ):
            kept.append(spelt)
    return kept


@functools.lru_cache(maxsize=256)
def parse(guard: str) -> ast.expr:
    """The guard's tree, parsed once per guard; ValueError where it holds anything but size arithmetic."""
    try:
        tree = ast.parse(guard, mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"guard {guard!r} does not parse: {exc.msg}") from None
    for node in ast.walk(tree):
        allowed = (ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.BinOp, ast.Compare,
                   ast.Constant, ast.Subscript, ast.Attribute, ast.Name, ast.Load, *_BINARY, *_COMPARE)
        if not isinstance(node, allowed) or (isinstance(node, ast.Constant) and type(node.value) is not int):
            raise ValueError(f"guard {guard!r} holds {type(node).__name__}, not size arithmetic")
        if isinstance(node, ast.Attribute) and node.attr != "shape":
            raise ValueError(f"guard {guard!r} reads .{node.attr}, not .shape")
    _sizes_read(tree)
    return tree


def sizes_read(guard: str) -> set[tuple[str, int]]:
    """The (input name, axis) pairs a guard reads; ValueError where it is not size arithmetic."""
    return _sizes_read(parse(guard))


def violated(guards: Sequence[str], shapes: Shapes) -> str | None:
    """The first guard that ``shapes`` (input name -> sizes) break, or None."""
    for guard in guards:
        if not _value(parse(guard), shapes):
            return guard
    return None


def warning(label: str, shapes: Sequence[Sequence[int]], guard: str) -> str:
    """What lower() says when a check's sizes break a guard: what it means and what to do."""
    return (
        f"{label} input shapes {[list(s) for s in shapes]} break {guard!r}, a guard torch.export made where the "
        "model's code branches on its input sizes: the captured graph holds only where it is true, so Deployed "
        "refuses such inputs with an InputError. To deploy them, capture with an example whose sizes take the "
        "model's general branch (not a size it special-cases, such as its configured image size), or declare "
        "dynamic_shapes that keep the guard true"
    )


def _sizes_read(tree: ast.expr) -> set[tuple[str, int]]:
    """The (input, axis) pairs read; ValueError where a name or an attribute stands alone."""
    read, parts = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            read.add(_size_ref(node))
            parts |= {id(node.value), id(node.value.value)}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Name, ast.Attribute)) and id(node) not in parts:
            raise ValueError(f"{ast.unparse(node)} stands alone: only name.shape[i] is a size")
    return read


def _size_ref(node: ast.Subscript) -> tuple[str, int]:
    base, index = node.value, node.slice
    if not (isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) and isinstance(index, ast.Constant)
            and type(index.value) is int):
        raise ValueError(f"{ast.unparse(node)} is not name.shape[i]")
    return base.value.id, index.value


def _value(node: ast.expr, shapes: Shapes) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Subscript):
        name, axis = _size_ref(node)
        return int(shapes[name][axis])
    if isinstance(node, ast.UnaryOp):
        inner = _value(node.operand, shapes)
        return (not inner) if isinstance(node.op, ast.Not) else -inner
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_value(node.left, shapes), _value(node.right, shapes))
    if isinstance(node, ast.BoolOp):
        values = (_value(v, shapes) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare):
        left = _value(node.left, shapes)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _value(right_node, shapes)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    raise ValueError(f"{ast.unparse(node)} is not size arithmetic")
