"""Cut again with more nodes on the host: the ncnn lowering's answer to an op pnnx left unconverted.

``host_postprocess_split`` keeps the graph it cut (``gm.meta[UNSPLIT]``), and every node keeps its
name from there (``node.meta[ORIGIN]``) in whichever stage it lands. ``recut`` marks the named
nodes of that graph for the host (``host_reasons.FORCED``, with the reason the report shows) and
cuts a copy of it again; the marks stay on the copy's kept graph, so a later round adds to them.
"""

from __future__ import annotations

from torch.fx import GraphModule, Node

from fxdeploy.partition.cut import ORIGIN, UNSPLIT, host_postprocess_split, plain_copy
from fxdeploy.partition.host_reasons import FORCED
from fxdeploy.settings import Settings


def origin(node: Node) -> str:
    """The node's name in the graph before any cut."""
    return str(node.meta.get(ORIGIN, node.name))


def recut(gm: GraphModule, forced: dict[str, str], settings: Settings) -> GraphModule:
    """``gm``'s graph before the cut, cut again with the nodes named in ``forced`` on the host (each
    with its reason). Raises KeyError naming a node the graph does not have."""
    work = plain_copy(gm.meta.get(UNSPLIT, gm))
    nodes = {origin(node): node for node in work.graph.nodes}
    missing = sorted(set(forced) - set(nodes))
    if missing:
        raise KeyError(f"no node(s) {missing} in the graph before the cut")
    for name, why in forced.items():
        nodes[name].meta[FORCED] = why
    return host_postprocess_split(work, settings).graph_module
