"""Passes see a functional graph: no op writes into a tensor (DESIGN.md, "Sound by construction").

torch.export's graph keeps the model's in-place writes (``y = x.clone(); y[:, 0] = ...`` is a
``clone`` and a ``copy_`` into a view of it). A rewrite that is right on values can be wrong on
such a graph: dropping that ``clone`` as a no-op sends the write to ``x``. So a graph that writes
anywhere is functionalized (torch.export's ``run_decompositions({})``: writes become
``select_scatter``/``slice_scatter``/``index_put``, views of written tensors are recomputed) before
any pass runs. A graph with no write is functional already: its views alias nothing that changes,
and it is kept as captured (functionalization would also spell out ``flatten`` with the example's
static sizes).
"""

from __future__ import annotations

import torch


def writes(node: torch.fx.Node) -> bool:
    """Whether ``node`` mutates one of its inputs (an in-place or ``out=`` op)."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    return bool(target._schema.is_mutable)


def functionalize(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """``ep`` with every write turned into a functional op; ``ep`` itself where nothing writes."""
    if not any(writes(node) for node in ep.graph.nodes):
        return ep
    return ep.run_decompositions({})
