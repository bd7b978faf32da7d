"""Find the first op whose values ncnn's engine gets wrong, by bisecting the engine stage.

Where the engine does not give PyTorch's values on the example image (a pnnx mis-conversion),
the stage is cut after one of its ops (a prefix whose one output is that op's value, per image)
and the prefix lowered and checked as the stage was. Bisection over the ops, in graph order,
finds the first whose prefix differs: the op pnnx got wrong, assuming a wrong value stays wrong
downstream, and the ncnn layer that gave its value (the one writing the prefix's output blob).
The host fallback (``ncnn_fallback``) then runs that op on the host, the graph is cut again
around it, and the lowering checks the result as before; the report names the layer, the op, its
source line and why it moved.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from fxdeploy.errors import LoweringError
from fxdeploy.partition.recut import origin
from fxdeploy.passes.graph_utils import call_site

logger = logging.getLogger(__name__)
PROBES = 12
"""At most this many prefixes are lowered (a stage of 4096 ops)."""
DIFFERS = "ncnn's engine gives other values than PyTorch from this op on (found by bisecting the stage): "


class ValuesDiffer(LoweringError):
    """ncnn's engine does not give PyTorch's values; ``nodes`` (name before the cut -> why) is the
    first op found to differ, for the host fallback, or empty where none was found."""

    def __init__(self, message: str, nodes: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.nodes = nodes or {}


Probe = Callable[[torch.fx.GraphModule, list[int]], str | None]
"""Lowers a prefix (taking the stage inputs listed); where its values differ, the ncnn layer
that wrote its output ("Interp upsample_2"), else None."""


def first_differing(stage: torch.fx.GraphModule, batch: str, differs: Probe) -> tuple[torch.fx.Node, str] | None:
    """The first op of ``stage`` whose prefix ``differs``, with its ncnn layer; None where no prefix does."""
    points = [n for n in stage.graph.nodes if _probe_point(n, batch)]
    low, high, probes = 0, len(points), 0  # the prefixes before ``low`` match; the stage itself differs
    layers: dict[torch.fx.Node, str] = {}
    while low < high and probes < PROBES:
        middle = (low + high) // 2
        layer = differs(*prefix(stage, points[middle]))
        if layer is not None:
            high, layers[points[middle]] = middle, layer
        else:
            low = middle + 1
        probes += 1
    found = points[low] if low < len(points) and low == high else None
    logger.debug("ncnn bisection: %d probe(s), first differing op %s", probes, found)
    return (found, layers[found]) if found is not None else None


def blamed(node: torch.fx.Node, layer: str) -> dict[str, str]:
    """The host fallback's entry for ``node``: its name before the cut, and why it moves."""
    op = getattr(node.target, "__name__", node.target)
    return {origin(node): f"{DIFFERS}{op} ({call_site(node)}), ncnn layer {layer}"}


def prefix(stage: torch.fx.GraphModule, node: torch.fx.Node) -> tuple[torch.fx.GraphModule, list[int]]:
    """``stage`` up to ``node``, whose value is its one output, and the inputs that part reads."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    graph.graph_copy(stage.graph, env)  # every node but the output
    graph.output((env[node],))
    graph.eliminate_dead_code()
    placeholders = [n for n in stage.graph.nodes if n.op == "placeholder"]
    kept = [k for k, n in enumerate(placeholders) if env[n].users]
    for n in placeholders:
        if not env[n].users:
            graph.erase_node(env[n])
    part = torch.fx.GraphModule(stage, graph)
    part.eval()
    return part, kept


def _probe_point(node: torch.fx.Node, batch: str) -> bool:
    """A float value per image: the batch leads, at most four dims per image (an ncnn Mat)."""
    value = node.meta.get("val")
    return (node.op == "call_function" and isinstance(value, torch.Tensor) and value.is_floating_point()
            and 2 <= value.dim() <= 5 and str(value.shape[0]) == batch)
