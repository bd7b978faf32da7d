"""How ``emptied`` cuts a selection: its op run so that it keeps its first n rows, or every row
it could; in the captured graph (``Cutting``), and in the model run eagerly (``CuttingEagerly``:
the same op, called from the same line, the same occurrence there)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

import sympy
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from fxdeploy.capture.frames import Frame
from fxdeploy.passes.remove_asserts import ASSERT_OPS

aten = torch.ops.aten


Cut = Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]
"""Runs a selection's op (target, args, kwargs) so that it keeps no rows, or every row it could."""


def first_rows(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], places: list[tuple[int, int]] | None,
                count: int) -> Any:
    """The op's result cut to its first ``count`` along each (leaf, dim) of ``places``; None: dim 0 of every leaf."""
    leaves, spec = pytree.tree_flatten(func(*args, **kwargs))
    places = [(i, 0) for i in range(len(leaves))] if places is None else places
    for leaf, dim in places:
        leaves[leaf] = leaves[leaf].narrow(dim, 0, min(count, leaves[leaf].shape[dim])).clone()
    return pytree.tree_unflatten(leaves, spec)


EAGERLY = {aten.where.default: aten.nonzero.default, aten.nonzero_numpy.default: aten.nonzero.default,
            aten.argwhere.default: aten.nonzero.default}
"""Graph ops that eager dispatches as another: ``torch.where(mask)`` runs ``nonzero`` and unbinds its
columns, so the first n rows of the one give the first n entries of each of the other's results."""
MASK_DTYPES = (torch.bool, torch.uint8)
MASKED = {aten.index.Tensor: 1, aten.masked_select.default: 1, aten.nonzero.default: 0, aten.argwhere.default: 0}
"""The ops whose selection every row can pass: the argument that holds the mask (for ``index``, its
boolean indices; for ``nonzero``, the tensor itself)."""


def every_row_applies(node: torch.fx.Node) -> bool:
    if node.target not in MASKED:
        return False
    held = node.args[MASKED[node.target]]
    masks = held if isinstance(held, (list, tuple)) else [held]
    return node.target is not aten.index.Tensor or any(
        isinstance(m, torch.fx.Node) and getattr(m.meta.get("val"), "dtype", None) in MASK_DTYPES
        for m in masks
    )


def every_row(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    def passing(mask: Any) -> Any:
        if not isinstance(mask, torch.Tensor) or (func is aten.index.Tensor and mask.dtype not in MASK_DTYPES):
            return mask
        return torch.ones_like(mask)

    args = list(args)
    held = args[MASKED[func]]
    args[MASKED[func]] = [passing(m) for m in held] if isinstance(held, (list, tuple)) else passing(held)
    return func(*args, **kwargs)


class Cutting(torch.fx.Interpreter):
    """Runs the graph with one node's selection cut, recording the asserts that break."""

    def __init__(self, gm: torch.fx.GraphModule, name: str, cut: Cut) -> None:
        super().__init__(gm)
        self.name, self.cut = name, cut
        self.broken: list[sympy.Basic | str] = []

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.op == "call_function" and n.target in ASSERT_OPS:
            args, _ = self.fetch_args_kwargs_from_env(n)
            if n.target is aten._assert_scalar.default and not args[0]:
                expr = assert_expr(n)
                self.broken.append(_said(args[1] if len(args) > 1 else "") if expr is None else expr)
            return None
        if n.name != self.name:
            return super().run_node(n)
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        return self.cut(n.target, args, kwargs)


class CuttingEagerly(TorchDispatchMode):
    """Cuts the selection of the ``occurrence``-th call of ``target`` made from the line ``site``."""

    def __init__(self, target: Any, site: Frame, occurrence: int, cut: Cut) -> None:
        super().__init__()
        self.target, self.site, self.occurrence, self.cut = target, site, occurrence, cut
        self.seen, self.done = 0, False

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func != self.target or self.done or not called_from(self.site):
            return func(*args, **(kwargs or {}))
        self.seen += 1
        if self.seen <= self.occurrence:
            return func(*args, **(kwargs or {}))
        self.done = True
        return self.cut(func, args, kwargs or {})


def called_from(site: Frame) -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if frame.f_lineno == site.line and code.co_name == site.func and code.co_filename == site.file:
            return True
        frame = frame.f_back
    return False


def _said(message: Any) -> str:
    """The expression an assert's message names (``ep.module()`` keeps no value on its condition
    under torch 2.11): "Runtime assertion failed for expression Eq(u2, 23) on node 'eq'"."""
    match = re.search(r"for expression (.+?) on node", str(message))
    return match.group(1) if match else str(message)


def assert_expr(node: torch.fx.Node) -> sympy.Basic | None:
    condition = node.args[0] if node.args else None
    value = condition.meta.get("val") if isinstance(condition, torch.fx.Node) else None
    return value.node.expr if isinstance(value, torch.SymBool) else None
