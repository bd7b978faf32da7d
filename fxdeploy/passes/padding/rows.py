"""Rows held at a static bound: what ``pad_compactions`` knows about each data-dependent size.

A selection's size is an unbacked symbol (``u3``). Once padded, the symbol has a static bound (the
rows the selection was taken from) and a count: a 0-d long tensor in the graph, the number of
valid rows. Every padded tensor keeps its valid rows first, so a size derived from such symbols
(``Min(1000, u3)`` after a topk, ``u3 + u4`` after a cat, ``Min(300, u5)`` after a slice) has a
bound and a count that follow from its expression: the bound by putting each symbol's bound in,
the count by spelling the expression out as tensor ops on the symbols' counts.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy
import sympy
import torch

aten = torch.ops.aten
Node = torch.fx.Node
Count = Node | int


class UnsupportedSize(ValueError):
    """A size expression this module cannot spell as tensor ops."""


class PaddedRows:
    """The padded symbols of one graph: their static bounds and count nodes."""

    def __init__(self, graph: torch.fx.Graph) -> None:
        self.graph = graph
        self.bounds: dict[sympy.Symbol, int] = {}
        self.counts: dict[sympy.Symbol, Node] = {}
        self.sites: dict[sympy.Symbol, str] = {}  # where each selection was made
        self._spelled: dict[sympy.Expr, Count] = {}
        self.partitions: dict[Node, tuple[Node, Node]] = {}  # each mask's (order, count), made once
        self.restored: set[Node] = set()  # values given back their padded size; what reads them is recomputed

    def add(self, symbol: sympy.Symbol, bound: int, count: Node, site: str) -> None:
        self.bounds[symbol] = bound
        self.counts[symbol] = count
        self.sites[symbol] = site

    def site(self, node: Node) -> str:
        """Where the rows a node holds were selected."""
        for size in getattr(node.meta.get("val"), "shape", ()):
            expr = self.size(size)
            if expr is not None:
                return self.site_of(expr)
        return "an earlier selection"

    def site_of(self, expr: sympy.Expr) -> str:
        return self.sites[min(data_symbols(expr), key=str)]

    def size(self, size: Any) -> sympy.Expr | None:
        """``size``'s expression when it is made of padded symbols only, else None."""
        if not isinstance(size, torch.SymInt):
            return None
        expr = size.node.expr
        symbols = data_symbols(expr)
        return expr if symbols and symbols <= self.bounds.keys() else None

    def rows(self, node: Any) -> sympy.Expr | None:
        """The padded expression of a node's dim 0, else None."""
        value = node.meta.get("val") if isinstance(node, Node) else None
        if not isinstance(value, torch.Tensor) or value.dim() == 0:
            return None
        return self.size(value.shape[0])

    def dims(self, node: Any) -> list[int]:
        """The dims of a node's value that hold padded rows."""
        return self.dims_of(node.meta.get("val") if isinstance(node, Node) else None)

    def dims_of(self, value: Any) -> list[int]:
        if not isinstance(value, torch.Tensor):
            return []
        return [d for d, size in enumerate(value.shape) if self.size(size) is not None]

    def bound(self, expr: sympy.Expr) -> int:
        """The most rows ``expr`` can count, with each symbol anywhere in [0, its bound]: its value at
        the bounds where it grows with each symbol (``Min(1000, u)``, ``u + v``: the size the ops give
        the padded tensors), else its largest over every count (``5 - Min(5, u)``, a fill up to a
        fixed size, is largest at no rows selected)."""
        at_bounds = int(expr.xreplace({s: sympy.Integer(b) for s, b in self.bounds.items()}))
        return at_bounds if _growing(expr) else self._largest(expr)

    def _largest(self, expr: sympy.Expr) -> int:
        symbols = sorted(expr.free_symbols, key=str)
        if not set(symbols) <= self.bounds.keys():
            raise UnsupportedSize(f"a size {expr} of selected rows and of something else")
        if math.prod(self.bounds[s] + 1 for s in symbols) > _MAX_POINTS:
            raise UnsupportedSize(f"a size {expr} of selected rows that shrinks as they grow")
        grid = numpy.meshgrid(*(numpy.arange(self.bounds[s] + 1) for s in symbols), sparse=True, indexing="ij")
        return int(numpy.max(_values(expr, dict(zip(symbols, grid, strict=True)))))

    def count(self, expr: sympy.Expr) -> Count:
        """The number of valid rows of a padded size, as graph nodes at the insertion point."""
        if expr not in self._spelled:
            self._spelled[expr] = self._spell(expr)
        return self._spelled[expr]

    def valid(self, expr: sympy.Expr) -> Node:
        """A bool [bound] mask of the valid rows (the first ``count``)."""
        call = self.graph.call_function
        index = call(aten.arange.default, (self.bound(expr),), {"dtype": torch.long})
        count = self.count(expr)
        return call(aten.lt.Tensor if isinstance(count, Node) else aten.lt.Scalar, (index, count))

    def partition(self, valid: Node, rows: int) -> tuple[Node, Node]:
        """The stable partition of ``rows`` by ``valid``: an order with the valid rows first, in
        their order, then the others; and the count of valid rows. Everything derives from one
        cumsum, so that a host/engine split keeps it together."""
        call = self.graph.call_function
        upto = call(aten.cumsum.default, (valid, 0), {"dtype": torch.long})  # valid rows in [0, i]
        count = call(aten.select.int, (upto, 0, -1))
        index = call(aten.arange.default, (rows,), {"dtype": torch.long})
        after_valid = call(aten.add.Tensor, (call(aten.sub.Tensor, (index, upto)), count))
        position = call(aten.where.self, (valid, call(aten.sub.Tensor, (upto, 1)), after_valid))
        order = call(aten.scatter.src, (call(aten.zeros_like.default, (index,)), 0, position, index))
        return order, count

    def _spell(self, expr: sympy.Expr) -> Count:
        if expr.is_Integer:
            return int(expr)
        if expr.is_Symbol:
            return self.counts[expr]
        name = type(expr).__name__
        folds: dict[str, tuple[Callable[[int, int], int], Any, Any]] = {
            "Add": (int.__add__, aten.add.Tensor, aten.add.Tensor),
            "Mul": (int.__mul__, aten.mul.Tensor, aten.mul.Tensor),
            "Min": (min, aten.minimum.default, None),
            "Max": (max, aten.maximum.default, None),
        }
        if name not in folds:
            raise UnsupportedSize(f"a size {expr} ({name}) derived from selected rows")
        result: Count | None = None
        for term in expr.args:
            value = self.count(term)
            result = value if result is None else self._combine(name, folds[name], result, value)
        assert result is not None
        return result

    def _combine(self, name: str, fold: tuple[Any, Any, Any], a: Count, b: Count) -> Count:
        python, both, with_int = fold
        if isinstance(a, int) and isinstance(b, int):
            return python(a, b)
        if isinstance(a, int):
            a, b = b, a
        call = self.graph.call_function
        if isinstance(b, int) and name in ("Min", "Max"):
            return call(aten.clamp.default, (a, None, b) if name == "Min" else (a, b))
        if isinstance(b, int):
            return call(with_int, (a, b))
        return call(both, (a, b))


_MAX_POINTS = 4_000_000
"""The most counts ``bound`` tries for a size that shrinks as rows are selected."""


def _growing(expr: sympy.Expr) -> bool:
    """Whether ``expr`` cannot shrink as any symbol grows: symbols and integers joined by sums,
    ``Min``, ``Max`` and products of one such term by a number at least 0."""
    if expr.is_Integer or expr.is_Symbol:
        return True
    name = type(expr).__name__
    if name in ("Add", "Min", "Max"):
        return all(_growing(term) for term in expr.args)
    if name == "Mul":
        terms = [term for term in expr.args if not term.is_Integer]
        return len(terms) == 1 and _growing(terms[0]) and all(t >= 0 for t in expr.args if t.is_Integer)
    return False


def _values(expr: sympy.Expr, values: dict[sympy.Symbol, numpy.ndarray]) -> Any:
    """``expr`` at every point of a grid of counts (numpy broadcasting)."""
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        return values[expr]
    name = type(expr).__name__
    join = {"Add": numpy.add, "Mul": numpy.multiply, "Min": numpy.minimum, "Max": numpy.maximum}.get(name)
    if join is None:
        raise UnsupportedSize(f"a size {expr} ({name}) derived from selected rows")
    return functools.reduce(join, (_values(term, values) for term in expr.args))


def data_symbols(expr: sympy.Expr) -> set[sympy.Symbol]:
    """The data-dependent (unbacked) symbols of a size expression."""
    return {s for s in expr.free_symbols if str(s).startswith("u")}
