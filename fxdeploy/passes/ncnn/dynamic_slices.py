"""Give a slice along a dynamic dim an end that reads the dim's size.

``x[..., 1:]`` and ``x[..., :-1]`` along a dynamic width (a difference of neighbours, a shifted
copy) were lost on ncnn: pnnx writes the dynamic dim as ``?`` in its shapes, finds the slice's input
and output shapes equal (``(1, 6, 8, ?)`` both), drops the slice as a no-op, and the engine gave
the unsliced tensor (lower()'s check refused it). A slice whose end is an expression of the input's
size keeps a second operand, which pnnx does not drop, and becomes ncnn's Crop of an expression
(``20="1w"``), which ncnn evaluates at each input's size:

    x[d, a:]          ==  x[d, a:size(x, d)]
    x[d, a:-k]        ==  x[d, a:size(x, d) - k]
    narrow(x, d, a, n) ==  x[d, a:a + n]            (narrow's definition; pnnx leaves every narrow
                                                    unconverted)

Exact: the same elements (slice clamps an end past the size to the size, and a negative end counts
from it). Fires on a step-1 slice with a number start in [0, size) and a number end (open or
negative) along a dim whose size, and the slice's, are symbolic (a slice of static size along the
dim stays: its output shape differs from its input's, and pnnx keeps it); on every narrow from a
number start.
"""

from __future__ import annotations

import logging
import operator

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import call_site, replaced_by
from fxdeploy.settings import Settings

logger = logging.getLogger(__name__)
aten = torch.ops.aten
Node = torch.fx.Node
_OPEN = 2**62
"""An end at least this large is the size (torch.export writes ``x[a:]`` with 2**63 - 1)."""


def dynamic_slices(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        reason = check(node)
        if reason is not None:
            if node.op == "call_function" and node.target in (aten.slice.Tensor, aten.narrow.default):
                logger.debug("dynamic_slices: %s stays: %s", call_site(node), reason)
            continue
        with gm.graph.inserting_before(node):
            new = _spelled(gm.graph, node)
        replaced_by(new, node)
        node.replace_all_uses_with(new[-1])
        gm.graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def _spelled(graph: torch.fx.Graph, node: Node) -> list[Node]:
    """The nodes of the slice with its end as an expression of sizes (the slice last)."""
    source, dim, start = node.args[0], node.args[1] if len(node.args) > 1 else 0, _start(node)
    if node.target is aten.narrow.default:
        length = node.args[3]
        end = graph.call_function(operator.add, (start, length)) if isinstance(length, Node) else start + length
        sliced = graph.call_function(aten.slice.Tensor, (source, dim, start, end))
        return [end, sliced] if isinstance(end, Node) else [sliced]
    size = graph.call_function(aten.sym_size.int, (source, dim))
    new = [size]
    if _end(node) < 0:
        new.append(graph.call_function(operator.add, (size, _end(node))))
    return [*new, graph.call_function(aten.slice.Tensor, (source, dim, start, new[-1]))]


def _start(node: Node) -> object:
    start = node.args[2] if len(node.args) > 2 else None  # noqa: PLR2004 - slice(x, dim, start, ...)
    return 0 if start is None else start


def _end(node: Node) -> object:
    """A slice's end; ``_OPEN`` for one to the size (None, or torch.export's 2**63 - 1)."""
    end = node.args[3] if len(node.args) > 3 else None  # noqa: PLR2004 - slice(x, dim, start, end, step)
    return _OPEN if end is None or isinstance(end, int) and end >= _OPEN else end


def check(node: Node) -> str | None:
    """None when ``node`` is a narrow from a number start, or a step-1 slice of a dynamic dim to a
    dynamic size, from a number start, to an open or negative end; else why not."""
    if node.op != "call_function" or node.target not in (aten.slice.Tensor, aten.narrow.default) or node.kwargs:
        return "not a slice or narrow"
    source, value = node.args[0], node.meta.get("val")
    if not isinstance(source, Node) or not isinstance(value, torch.Tensor):
        return "its input carries no tensor value"
    if node.target is aten.slice.Tensor and (node.args[4:5] or (1,))[0] != 1:
        return "its step is not 1 (strided_slices spells a stepped slice)"
    dim = (node.args[1] if len(node.args) > 1 else 0) % value.dim()
    dynamic = isinstance(source.meta["val"].shape[dim], torch.SymInt) and isinstance(value.shape[dim], torch.SymInt)
    if node.target is aten.slice.Tensor and not dynamic:
        return "it slices a static dim, or to a static size (pnnx keeps it)"
    start = _start(node)
    if not isinstance(start, int) or start < 0:
        return f"its start {start!r} is not a number in [0, size)"
    end = _end(node)
    if node.target is aten.slice.Tensor and not (isinstance(end, int) and (end < 0 or end == _OPEN)):
        return f"its end {end!r} is neither open nor negative (an expression of sizes pnnx keeps)"
    return None
