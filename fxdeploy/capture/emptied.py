"""A branch the example decided on a selection's size, checked where the selection keeps none or all.

Where Python branches on how many rows a filter kept (``if not x.shape[0]: continue``), the
example's real values decide the branch (``exporting._decided_by_example``) and torch records the
side taken as an assert on the size (``Ne(u0, 0)``), which the passes drop. The graph then computes
that side for every input. Often the other side gives the same result where the selection is
empty (Ultralytics' ``continue`` leaves the image's zero rows, as the filter would); sometimes it
does not (``if len(kept) == 0: out.append(default_row)``), and the artifact would silently differ
from eager on every such image.

So each selection is cut on the example: to its first n rows for the fewest n (none, one, ...)
at which a recorded side breaks (``if kept.shape[0] == 1``) and at the edges where one breaks next
to sizes where all hold (``if n > 20: kept = kept[:5]``: 20), and, for a mask, with every row
passing (``if n > max_det: kept = kept[:max_det]``, which an example with few rows did not take).
Cut in the captured graph, the recorded asserts say whether a side breaks; where one does, the
model runs eagerly with the same op at the same source line (the node's stack trace) cut the same
way, and Python takes the other side. Where the two disagree, the capture is refused naming the
line. A selection that the example left empty, where a branch depended on it, is refused too: the
graph holds only the empty side. What cannot be checked (the graph cannot run so cut, the model
raises, or the op runs elsewhere in eager) is logged and left as it was.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import sympy
import torch
from torch.utils import _pytree as pytree

from fxdeploy.capture.cuts import (
    EAGERLY,
    Cut,
    Cutting,
    CuttingEagerly,
    assert_expr,
    every_row,
    every_row_applies,
    first_rows,
)
from fxdeploy.capture.frames import Frame, described, text_frames
from fxdeploy.errors import CaptureError, first_line

logger = logging.getLogger(__name__)
aten = torch.ops.aten


class OtherSide(CaptureError):
    """The other side of a branch the example decided gives another result than the graph."""


def check(ep: torch.export.ExportedProgram, model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Refuse ``ep`` where cutting a selection to a few rows (or letting every row pass) breaks a
    branch the example decided and eager's other side differs from what the graph computes there;
    see the module's docstring."""
    nodes = list(ep.graph.nodes)
    asserts = [assert_expr(n) for n in nodes if n.target is aten._assert_scalar.default]
    module: torch.fx.GraphModule | None = None  # the program runnable, made once where a branch needs it
    for node in nodes:
        for symbol in (node.meta.get("unbacked_bindings") or {}):
            places = _places(node.meta.get("val"), symbol)
            exprs = [e for e in asserts if e is not None and symbol in e.free_symbols]
            if not places or not exprs:
                continue
            site = _site(node)
            kept_none = [e for e in exprs if all(_at(e, symbol, n) is (sympy.true if n == 0 else sympy.false)
                                                 for n in _SOME_SIZES)]
            if kept_none:
                raise OtherSide(_KEPT_NONE.format(where=_where(node), recorded=_recorded(kept_none)))
            exprs = [e for e in exprs if not _pins(e)]  # a count read as a number: the padding passes' to judge
            breaking = [n for n in range(_FEW_ROWS + 1) if _breaks(exprs, symbol, n)]
            kept = _example_count(ep, symbol)  # a cut to as many rows or more leaves the example's selection
            sizes = [n for n in dict.fromkeys([*breaking[:3], *_edges(exprs, symbol)]) if kept is None or n < kept]
            rows = None if node.target in EAGERLY else places  # dim 0 of each: the eager op's too
            cuts = [(_KEEPS.get(n, f"keeps {n} rows"), functools.partial(first_rows, places=rows, count=n))
                    for n in sizes]
            if every_row_applies(node):
                cuts.append(("keeps every row it could", every_row))
            if cuts and site is None:
                logger.info("a branch on the size of %s is not checked: no source line", node)
                continue
            for keeps, cut in cuts:
                module = ep.module() if module is None else module
                found = _compare(module, nodes, model, (args, kwargs), node, cut, site)
                if found:
                    broken, difference = found
                    raise OtherSide(_DIFFERS.format(where=_where(node), recorded=_recorded(broken), keeps=keeps,
                                                    difference=difference))


_FEW_ROWS = 64  # cut to the first n rows only where the example kept n or more: more are cut as "every row"
_EDGES = 3  # edges checked per selection, each one more eager run of the model
_KEEPS = {0: "keeps none", 1: "keeps one row"}
_SOME_SIZES = (0, 1, 2, 3, 1000)  # an assert true at 0 and false at the others holds only where none is kept
_KEPT_NONE = (
    "the example's selection at {where} keeps no rows, and a Python branch on its size was decided that way "
    "({recorded}): the captured graph would give the no-rows side for every input. Give an example on which that "
    "selection keeps rows (for a detector: an image with detections)."
)
_DIFFERS = (
    "the example decided a Python branch on how many rows the selection at {where} keeps ({recorded}). Where it "
    "{keeps}, the model takes the other side and {difference}, which the captured graph does not hold: it would "
    "give the example's side for every input. Compute both sides with tensor ops (e.g. torch.where on the count), "
    "or keep the result the same on both sides."
)


def _compare(
    module: torch.fx.GraphModule, nodes: list[torch.fx.Node], model: Any, inputs: tuple[Any, Any],
    node: torch.fx.Node, cut: Cut, site: Frame,
) -> tuple[list[sympy.Basic], str] | None:
    """With ``node``'s selection cut: the recorded sides that break in the graph, and how eager's
    result differs from the graph's; None where no side breaks, they agree or eager cannot show it."""
    args, kwargs = inputs
    flat = pytree.tree_leaves((args, kwargs))
    running = Cutting(module, node.name, cut)
    try:
        graph = _seeded(running.run, *flat)
    except Exception as exc:  # noqa: BLE001 - the graph cannot run so cut: eager decides alone
        logger.info("the graph with %s cut does not run (%s); the branch is not checked", node, first_line(exc))
        return None
    if not running.broken:
        return None  # every side the example decided still holds
    target = EAGERLY.get(node.target, node.target)
    occurrence = sum(1 for n in nodes[: nodes.index(node)] if EAGERLY.get(n.target, n.target) == target
                     and _site(n) == site)
    cutting = CuttingEagerly(target, site, occurrence, cut)
    try:
        with cutting:
            eager = _seeded(model, *args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the model refuses such a selection itself
        logger.info("the model raises with %s cut (%s); the branch is not checked", site, first_line(exc))
        return None
    if not cutting.done:
        logger.info("%s (%s) does not run eagerly where the graph has it; the branch is not checked", site, node)
        return None
    difference = _difference(pytree.tree_leaves(eager), pytree.tree_leaves(graph))
    if difference and _difference(pytree.tree_leaves(_seeded(model, *args, **kwargs)),
                                  pytree.tree_leaves(_seeded(torch.fx.Interpreter(module).run, *flat))):
        logger.info("the graph differs from eager on the example itself; the branch at %s is not checked", site)
        return None  # not the branch: a model whose runs differ (its own randomness) shows nothing here
    return (running.broken, difference) if difference else None


def _seeded(run: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``run`` with torch's generator seeded alike each time, the caller's generator state kept."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return run(*args, **kwargs)


def _difference(eager: list[Any], graph: list[Any]) -> str:
    if len(eager) != len(graph):
        return f"returns {len(eager)} values, not the graph's {len(graph)}"
    for i, (want, got) in enumerate(zip(eager, graph, strict=True)):
        if not isinstance(want, torch.Tensor) or not isinstance(got, torch.Tensor):
            if isinstance(want, torch.Tensor) or isinstance(got, torch.Tensor) or want != got:
                return f"returns {want!r} as output #{i}, not the graph's {got!r}"
            continue
        if want.shape != got.shape:
            return f"returns output #{i} with shape {list(want.shape)}, not the graph's {list(got.shape)}"
        a, b = want.double(), got.double()
        scale = max(1.0, float(a.abs().nan_to_num(0, 0, 0).max())) if a.numel() else 1.0
        if not torch.allclose(a, b, rtol=1e-4, atol=1e-4 * scale, equal_nan=True):
            return f"returns another output #{i} (largest difference {float((a - b).abs().nan_to_num(0).max()):g})"
    return ""


def _places(value: Any, symbol: sympy.Symbol) -> list[tuple[int, int]]:
    """(leaf, dim) of every size of ``value`` that is exactly ``symbol``."""
    places = []
    for i, leaf in enumerate(pytree.tree_leaves(value)):
        if isinstance(leaf, torch.Tensor):
            places += [(i, d) for d, size in enumerate(leaf.shape)
                       if isinstance(size, torch.SymInt) and size.node.expr == symbol]
    return places


def _breaks(exprs: list[sympy.Basic], symbol: sympy.Symbol, n: int) -> bool:
    return any(_at(e, symbol, n) is not sympy.true for e in exprs)


def _edges(exprs: list[sympy.Basic], symbol: sympy.Symbol) -> list[int]:
    """Sizes above 2 next to a number the asserts hold, where one breaks and a neighbour's all hold
    (``if len(keep) > 20: keep = keep[:5]``: 20, where at 0 to 2 rows both sides agree)."""
    near = sorted({n for e in exprs for c in e.atoms(sympy.Integer) for n in (int(c) - 1, int(c), int(c) + 1) if n > 2})
    return [n for n in near if _breaks(exprs, symbol, n)
            and not (_breaks(exprs, symbol, n - 1) and _breaks(exprs, symbol, n + 1))][:_EDGES]


def _example_count(ep: torch.export.ExportedProgram, symbol: sympy.Symbol) -> int | None:
    mode = torch._guards.detect_fake_mode([n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder"])
    value = getattr(getattr(mode, "shape_env", None), "real_tensor_prop_unbacked_vals", {}).get(symbol)
    return None if value is None else int(value)


def _pins(expr: sympy.Basic) -> bool:
    """``Eq(Min(25, u0), 25)``: Python read the count as a number (``len(pred)``), which fixed it.
    ``pad_compactions`` gives such a count its bound, or refuses it naming the line; no branch
    was taken, and the graph cut here would show the fixed number, not what the artifact computes."""
    return isinstance(expr, sympy.Eq) and any(a.is_Integer and a != 0 for a in expr.args)


def _at(expr: sympy.Basic, symbol: sympy.Symbol, size: int) -> Any:
    return expr.subs(symbol, size)


def _site(node: torch.fx.Node) -> Frame | None:
    """The innermost frame of the node's stack trace: the line that made the op."""
    frames = text_frames(node.meta.get("stack_trace") or "")
    return frames[-1] if frames else None


def _where(node: torch.fx.Node) -> str:
    return described(text_frames(node.meta.get("stack_trace") or ""))


def _recorded(exprs: list[sympy.Basic | str]) -> str:
    return "torch recorded " + ", ".join(f"`{e}`" for e in exprs)
