"""Passes see a functional graph: no op writes into a tensor (DESIGN.md, "Sound by construction").

torch.export's graph keeps the model's in-place writes (``y = x.clone(); y[:, 0] = ...`` is a
``clone`` and a ``copy_`` into a view of it). A rewrite that is right on values can be wrong on
such a graph: dropping that ``clone`` as a no-op sends the write to ``x``. So a graph that writes
anywhere is functionalized (torch.export's ``run_decompositions({})``: writes become
``select_scatter``/``slice_scatter``/``index_put``, views of written tensors are recomputed) before
any pass runs. A graph with no write is functional already: its views alias nothing that changes,
and it is kept as captured (functionalization would also spell out ``flatten`` with the example's
static sizes).

One op's schema is wrong about aliasing: eval-mode dropout (``F.dropout(x, p, training=False)``,
and its feature/alpha variants) returns ``x`` itself in eager, while its schema promises a new
tensor, so torch.export's graph treats it as a copy. A write through the result (``y =
F.dropout(x, p, self.training); y[y > 0] = 0``) then reaches ``x`` in eager but not in the graph.
Before functionalizing, each eval-mode dropout is replaced by its input: the graph then writes
where eager writes.

A write into an input stays in the functional program as a final ``copy_`` into that input.
An artifact does not write into the arrays it is given, so ``drop_input_writes`` sends the
copy's users to the value copied: the outputs are eager's, the inputs stay as they were.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten

# eval-mode (train=False) variants that return their input itself: ATen's _dropout_impl
# (native_dropout copies instead, so its schema is right and it is not listed)
ALIASING_DROPOUTS = frozenset(
    {aten.dropout.default, aten.feature_dropout.default, aten.alpha_dropout.default,
     aten.feature_alpha_dropout.default}
)


def writes(node: torch.fx.Node) -> bool:
    """Whether ``node`` mutates one of its inputs (an in-place or ``out=`` op)."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    return bool(target._schema.is_mutable)


def functionalize(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """``ep`` with every write turned into a functional op; ``ep`` itself where nothing writes.

    torch's retrace runs the program's input guards as code first, and that code fixes a dim
    derived from another (``32*h``) to the example's size (``(H - 1)//32 + 1 == 4`` evaluated as
    a guard on ``h``): the retrace leaves them out, and the result keeps them as data."""
    if not any(writes(node) for node in ep.graph.nodes):
        return ep
    _alias_eval_dropouts(ep.graph_module)
    guards = getattr(ep, "_guards_code", None)
    if not guards:
        return ep.run_decompositions({})
    ep._guards_code = []
    try:
        functional = ep.run_decompositions({})
    finally:
        ep._guards_code = guards
    functional._guards_code = guards
    return functional


def _alias_eval_dropouts(gm: torch.fx.GraphModule) -> None:
    """Each eval-mode dropout replaced by its input, which eager returns (the module docstring)."""
    changed = False
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target in ALIASING_DROPOUTS and _train_flag(node) is False:
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
            changed = True
    if changed:
        gm.recompile()


def _train_flag(node: torch.fx.Node) -> object:
    return node.kwargs["train"] if "train" in node.kwargs else node.args[2]


def drop_input_writes(gm: torch.fx.GraphModule) -> list[str]:
    """Remove the final ``copy_`` of a functionalized write into an input, its users taking the
    value copied (same shape and dtype: then the copy's result is that value). Returns the names
    of the inputs the model writes into."""
    written = []
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.copy_.default:
            continue
        dst, src = node.args[0], node.args[1]
        if not isinstance(dst, torch.fx.Node) or dst.op != "placeholder" or not _same_layout(dst, src):
            continue
        node.replace_all_uses_with(src)
        gm.graph.erase_node(node)
        written.append(str(dst.target))
    if written:
        gm.recompile()
    return written


def _same_layout(dst: torch.fx.Node, src: object) -> bool:
    a, b = dst.meta.get("val"), getattr(src, "meta", {}).get("val")
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
