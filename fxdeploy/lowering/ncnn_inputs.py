"""How an ncnn engine stage takes its inputs: which dim is the batch, which inputs every image gets
whole (``shared``), which give each image a group of rows (``grouped``: text queries, k per image),
and the stage rewrapped so that pnnx traces each as the engine will take it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy
import torch


def graph_batch(gm: torch.fx.GraphModule) -> str | None:
    """The batch, as ``batch_symbol`` spells it: the first input size that is one symbol alone (an
    input with k rows per image has ``k*batch``), else dim 0 of the first input."""
    sizes = [v.shape[0] for n in gm.graph.nodes if n.op == "placeholder"
             for v in [n.meta.get("val")] if isinstance(v, torch.Tensor) and v.dim() > 0]
    roots = [str(d) for d in sizes if isinstance(d, torch.SymInt) and d.node.expr.is_Symbol]
    return roots[0] if roots else str(sizes[0]) if sizes else None


def grouped_inputs(stage: torch.fx.GraphModule, batch: str) -> dict[int, int]:
    """Inputs whose dim 0 is ``k*batch`` (k > 1), each with its k: rows k*i..k*i + k-1 belong to image
    i (an open-vocabulary detector's text queries, k per image)."""
    grouped = {}
    for k, node in enumerate(n for n in stage.graph.nodes if n.op == "placeholder"):
        value = node.meta.get("val")
        size = value.shape[0] if isinstance(value, torch.Tensor) and value.dim() > 0 else None
        if isinstance(size, torch.SymInt):
            symbol = next((s for s in size.node.expr.free_symbols if str(s) == batch), None)
            ratio = sympy.simplify(size.node.expr / symbol) if symbol is not None else None
            if ratio is not None and ratio.is_Integer and int(ratio) > 1:
                grouped[k] = int(ratio)
    return grouped


def shared_inputs(stage: torch.fx.GraphModule, batch: str) -> list[int]:
    """Inputs of a later engine stage that carry no batch axis: what a host stage made from the
    image's size alone (RT-DETR's anchors and position embedding at a dynamic H/W, after
    ``unit_broadcasts`` dropped their leading 1). Every image gets the same one. With a batch fixed
    at 1, an input that leads with a 1 is taken per image (nothing tells the two apart), and one that
    does not (the column index ``arange(w) % w`` made on the host) is shared."""
    values = [n.meta.get("val") for n in stage.graph.nodes if n.op == "placeholder"]
    return [
        k for k, v in enumerate(values)
        if isinstance(v, torch.Tensor) and (v.dim() == 0 or str(v.shape[0]) != batch)
    ]


def with_float_inputs(stage: torch.fx.GraphModule, exact: list[int]) -> torch.fx.GraphModule:
    """``stage`` taking its integer and bool inputs (token ids, attention masks) as float32, cast
    back first (``aten::to``, which pnnx reads; it leaves ``aten::_to_copy`` as it is): ncnn's blobs
    hold float32, which holds every integer below 2**24 exactly (the executor refuses larger ones).
    Embedding lookups and mask arithmetic then run in the engine."""
    return _rewrapped(stage, exact, "_as_float", lambda k, value: value.float(),
                      lambda outer, value: (torch.ops.aten.to.dtype, (outer, value.dtype)), same_sizes=True)


def with_leading_one(stage: torch.fx.GraphModule, shared: list[int]) -> torch.fx.GraphModule:
    """``stage`` taking each shared input with a leading 1, squeezed off first: the engine then
    takes it as it takes an image, whose batch axis pnnx drops."""
    return _rewrapped(stage, shared, "_with_one", lambda k, value: value.unsqueeze(0),
                      lambda outer, value: (torch.ops.aten.squeeze.dim, (outer, 0)), same_sizes=False)


def with_groups(stage: torch.fx.GraphModule, grouped: dict[int, int]) -> torch.fx.GraphModule:
    """``stage`` taking each grouped input as one image's group, [1, k, ...], squeezed off first: the
    engine takes it as a shared input, and the executor gives each image its own rows."""
    return _rewrapped(stage, list(grouped), "_group",
                      lambda k, value: value.new_empty((1, grouped[k], *value.shape[1:])),
                      lambda outer, value: (torch.ops.aten.squeeze.dim, (outer, 0)), same_sizes=False)


def _rewrapped(
    stage: torch.fx.GraphModule, chosen: list[int], suffix: str, outer_value: Callable[[int, Any], Any],
    inner: Callable[[torch.fx.Node, Any], tuple[Any, tuple[Any, ...]]], *, same_sizes: bool,
) -> torch.fx.GraphModule:
    """``stage`` taking each ``chosen`` input as ``outer_value`` of it, made back into the value its
    nodes read by the ``inner`` op (which keeps the input's name). ``same_sizes``: the outer input
    has the inner one's sizes, and the stage reads them there (pnnx follows no size through a cast)."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    outer_of: dict[torch.fx.Node, torch.fx.Node] = {}
    placeholders = [n for n in stage.graph.nodes if n.op == "placeholder"]
    for k, node in enumerate(placeholders):
        outer = graph.placeholder(f"{node.name}{suffix}" if k in chosen else node.name)
        outer.meta = dict(node.meta)
        if k in chosen:
            outer.meta["val"] = outer_value(k, node.meta["val"])
            env[node] = graph.create_node("call_function", *inner(outer, node.meta["val"]), name=node.name)
            env[node].meta = dict(node.meta)
            outer_of[env[node]] = outer
        else:
            env[node] = outer
    for node in stage.graph.nodes:
        if node.op != "placeholder":
            env[node] = graph.node_copy(node, lambda a: env[a])
            if same_sizes and node.target is torch.ops.aten.sym_size.int and env[node].args[0] in outer_of:
                env[node].update_arg(0, outer_of[env[node].args[0]])
    wrapped = torch.fx.GraphModule(stage, graph)
    wrapped.eval()
    return wrapped

