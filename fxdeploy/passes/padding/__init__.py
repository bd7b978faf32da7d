"""Mask, don't compact: a data-dependent selection keeps its static size, valid rows first.

Detection postprocessing filters rows by score, takes the top k of the survivors, concatenates
the levels of a feature pyramid, runs an NMS and keeps its first k results. Each step has a size
that depends on the data, which static engines cannot hold. ``pad_compactions`` gives every such
size a static bound (the rows it was selected from) and a count, and keeps the valid rows first.
One rule per construct, each a ``check`` and a ``replace`` in its own file:

- ``selections``: ``x[mask]``, ``nonzero``, ``where(cond)``, ``masked_select``;
- ``topk``: ``topk(x, min(n, k))`` over selected rows;
- ``sort``: ``sort``/``argsort`` along selected rows, the padding ranked last;
- ``cat``: the levels of a pyramid, each selected (and ``F.pad`` of selected rows, or by their count,
  written as the cat of fills it is first: ``pads``);
- ``index_put``: writes by selected indices;
- ``reductions``: sums, extrema, means and matrix products over selected rows, the padding masked;
- ``writes``: selected rows written into a buffer of fixed size (``out[:n] = rows``), their count as a tensor;
- ``nms``: ``nms``/``batched_nms`` (and ``keep[:k]``) as a static ``multiclass_nms``;
- ``row_wise``: everything else that reads selected rows, or uses their count as a shape;
- ``outputs``: selected rows returned, with their count as a hidden output for the host to trim.

The graph is visited once, in order, so a rule sees its inputs already padded. Where the padded
form cannot equal eager the pass refuses, naming the call site (``CompactionError``).
"""

from __future__ import annotations

import torch
from torch._guards import detect_fake_mode

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import (
    MetaError,
    call_site,
    fill_meta,
    inherit_stack_traces,
    refresh_meta,
    unbacked_symbols,
)
from fxdeploy.passes.padding.cat import CAT
from fxdeploy.passes.padding.index_put import INDEX_PUT
from fxdeploy.passes.padding.nms import NMS
from fxdeploy.passes.padding.outputs import TRIM_OUTPUTS
from fxdeploy.passes.padding.pads import pads_as_cats
from fxdeploy.passes.padding.reductions import REDUCTIONS
from fxdeploy.passes.padding.row_wise import ROW_WISE, VIEWS
from fxdeploy.passes.padding.rows import PaddedRows, UnsupportedSize
from fxdeploy.passes.padding.rule import CompactionError, Rule
from fxdeploy.passes.padding.selections import BOOL_INDEX, MASKED_SELECT, NONZERO, WHERE
from fxdeploy.passes.padding.sort import SORT
from fxdeploy.passes.padding.topk import TOPK
from fxdeploy.passes.padding.writes import WRITES
from fxdeploy.settings import Settings

__all__ = ["RULES", "CompactionError", "Rule", "pad_compactions"]

# The first rule that matches a node rewrites it. ROW_WISE comes last: it takes every op that
# reads selected rows and that no construct rule took.
RULES: tuple[Rule, ...] = (
    BOOL_INDEX, NONZERO, WHERE, MASKED_SELECT, TOPK, SORT, CAT, INDEX_PUT, NMS, TRIM_OUTPUTS, REDUCTIONS, WRITES,
    ROW_WISE,
)


def pad_compactions(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    padded = pads_as_cats(gm)  # F.pad of selected rows, or by their count: the cat of fills it is
    rows = PaddedRows(gm.graph)
    known = set(gm.graph.nodes)
    shapes = _shape_env(gm)
    sized = {node: unbacked_symbols(node.meta.get("val")) for node in known}
    for node in list(gm.graph.nodes):
        if (node.op == "call_function" and any(a in rows.restored for a in node.all_input_nodes)
                and getattr(node.target, "overloadpacket", None) not in VIEWS
                and not node.meta.get("unbacked_bindings")):  # a size of its own (an NMS's) reads no input's
            fill_meta([node])  # its value was computed from a size the capture had fixed
            _refuse_fixed(node, rows, shapes)
            rows.restored.add(node)  # (a view's literal rows are row_wise's to restore, at the bound)
        rule = next((r for r in RULES if r.check(node, rows) is None), None)
        if rule is None:
            continue
        before = node.prev
        with gm.graph.inserting_before(node):
            try:
                rule.replace(gm, node, rows)
            except UnsupportedSize as exc:
                raise CompactionError(f"{call_site(node)}: {exc}; only sums, products, min and max are padded") from exc
        inherit_stack_traces(before, node, known)  # what replaces the op keeps its line
    if not rows.bounds:
        return PassResult(gm, padded)
    gm.graph.eliminate_dead_code()
    try:
        refresh_meta(gm)
    except MetaError as exc:
        raise CompactionError(f"{exc}: the padded graph does not hold together there, which is a bug in "
                              "fxdeploy's padding rules; report it with the model") from exc
    for node in gm.graph.nodes:
        if unbacked_symbols(node.meta.get("val")):
            raise CompactionError(
                f"{call_site(node)}: {node.target} still has a data-dependent size {tuple(node.meta['val'].shape)} "
                "after padding; compute it from a selection, topk, cat or NMS of static rows"
            )
    _refuse_unnamed(sized, rows)
    return PassResult(gm, True)


def _shape_env(gm: torch.fx.GraphModule) -> object:
    """The capture's shape env (None where the graph has no fake inputs)."""
    mode = detect_fake_mode([node.meta.get("val") for node in gm.graph.find_nodes(op="placeholder")])
    return mode.shape_env if mode else None


def _refuse_fixed(node: torch.fx.Node, rows: PaddedRows, shapes: object) -> None:
    """A value computed again from rows whose size the capture had fixed must not fix it anew: an
    op that reads them beside a size of the example's count (``arange(len(x))``) makes torch
    assert that the count is that number, and the padded rows would then pass for valid ones."""
    replacements = getattr(shapes, "replacements", {})
    for symbol in rows.bounds:
        if getattr(replacements.get(symbol), "is_number", False):
            raise CompactionError(
                f"{call_site(node)}: {node.target} reads the rows selected at {rows.site_of(symbol)} beside a size the "
                f"capture fixed at the example's count ({replacements[symbol]}, a len() or shape of them used as a "
                "number); the padded rows would pass for valid ones. Size it from the rows themselves (-1 in a view, "
                "or a mask)"
            )


def _refuse_unnamed(sized: dict[torch.fx.Node, set[str]], rows: PaddedRows) -> None:
    """Every data-dependent size of the captured graph must have got a bound and a count: a value
    whose rows no rule counted would keep its padding as if it were valid rows."""
    named = {str(symbol) for symbol in rows.bounds}
    for node, symbols in sized.items():
        if symbols - named:
            raise CompactionError(
                f"{call_site(node)}: {node.target} has a data-dependent size {tuple(node.meta['val'].shape)} that "
                "no padding rule counted, so its padded rows would pass for valid ones. This is a bug in fxdeploy's "
                f"padding rules (torch {torch.__version__}); report it with the model"
            )
