"""An adaptive average or max pool over a dynamic size, spelt with windows computed in the graph, on the ONNX targets.

torch.onnx has no translation for ``adaptive_avg_pool2d``: it runs torch's decomposition, which
branches in Python on the sizes (``in % out == 0``: an ``avg_pool2d`` whose kernel and stride are
the example's; whether the windows' lengths differ; the longest window) while it exports, where
no guard is kept. At another size the artifact pools the example's windows: wrong values or a
Gather out of bounds (``adaptive_avg_pool2d(x, (h // 3, 4))`` at ``h = 65``: off by 1.5, and lower()'s
check, at sizes where the branches agree, passed), or an output of another shape.

Each pooled dim is pooled on its own (a window's mean is the mean over its rows of the means of
its columns, every row holding as many): output ``i`` averages the input from
``floor(i * n / out)`` to ``ceil((i + 1) * n / out)``, as torch's kernel. Every window is read at
``n // out + 2`` places (the longest window is ``ceil(n / out) + 1`` at most), the places past its
end replaced by zeros, then summed and divided by the window's length. A pool whose sizes are all
static is left to torch's decomposition (exact there), and a global pool (every output size 1) to
torch.onnx's own (``check`` says why).

An adaptive max pool had no translation at all, at any size ("No ONNX function found for
aten.adaptive_max_pool2d"). The same windows give it: the places past a window's end are -inf, and
each window's maximum is taken dim by dim (NaN where the window holds one, as torch's kernel, where
ONNX Runtime's ReduceMax skips it) (a rectangle's maximum is
the maximum over its rows of their maxima). Only its values: a pool whose indices are read stays.
"""

from __future__ import annotations

import operator

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import replaced_by
from fxdeploy.settings import Settings

aten = torch.ops.aten
Node = torch.fx.Node
ADAPTIVE = (aten.adaptive_avg_pool2d.default, aten._adaptive_avg_pool2d.default, aten.adaptive_avg_pool1d.default)
MAX = (aten.adaptive_max_pool2d.default, aten.adaptive_max_pool1d.default)
"""Each returns (values, indices)."""


def adaptive_pools(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    graph = gm.graph
    for node in list(graph.nodes):
        if check(node) is not None:
            continue
        x, sizes = node.args[0], list(node.args[1])
        like = x.meta["val"]
        new: list[Node] = []
        pooled = x
        with graph.inserting_before(node):
            for offset, out in enumerate(sizes):
                pooled = _pool_dim(graph, new, pooled, like.dim() - len(sizes) + offset, out, like, node.target in MAX)
        replaced_by(new, node)
        for user in list(node.users) if node.target in MAX else []:  # getitem 0 (its values) and unread 1
            user.replace_all_uses_with(pooled)
            graph.erase_node(user)
        node.replace_all_uses_with(pooled)
        graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def check(node: Node) -> str | None:
    """None when ``node`` is an adaptive max pool whose indices nobody reads, or an adaptive average
    pool with a symbolic input or output size in a pooled dim and an output size other than 1 in
    some dim, of a float tensor; else why it stays."""
    if node.op != "call_function" or node.target not in ADAPTIVE + MAX:
        return "not an adaptive average or max pool"
    if node.target in MAX and any(user.target is not operator.getitem or (user.args[1] != 0 and user.users)
                                  for user in node.users):
        return "a max pool whose indices are read: this spelling gives only its values"
    x = node.args[0].meta.get("val") if isinstance(node.args[0], Node) else None
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        return "no float input recorded"
    sizes = list(node.args[1])
    if node.target in MAX:
        return None  # torch.onnx has no translation of it, at any size
    if all(size == 1 for size in sizes):
        return "a global pool: torch.onnx writes it for any size"
    pooled = list(x.shape[x.dim() - len(sizes):])
    if not any(isinstance(s, torch.SymInt | Node) for s in pooled + sizes):
        return "static sizes: torch's decomposition holds at them"
    return None


def _pool_dim(graph: torch.fx.Graph, new: list[Node], x: Node, dim: int, out: int | Node, like: torch.Tensor,
              maximum: bool) -> Node:
    """``x`` pooled along ``dim`` to ``out`` windows (their means, or maxima); the nodes made are
    appended to ``new``. ``like``: the pool's input value (its rank, dtype and device)."""

    def call(target: object, *args: object, **kwargs: object) -> Node:
        new.append(graph.call_function(target, args, kwargs))
        return new[-1]

    device, after = like.device, like.dim() - 1 - dim  # after: the dims after the pooled one
    n = call(aten.sym_size.int, x, dim)
    index = call(aten.arange.default, out, dtype=torch.int64, device=device)
    scaled = call(aten.mul.Tensor, index, n)
    start = call(aten.div.Tensor_mode, scaled, out, rounding_mode="floor")
    past = call(operator.sub, call(operator.add, n, out), 1)
    end = call(aten.div.Tensor_mode, call(aten.add.Tensor, scaled, past), out, rounding_mode="floor")
    longest = call(operator.add, call(operator.floordiv, n, out), 2)
    places = call(aten.add.Tensor, call(aten.unsqueeze.default, start, 1),
                  call(aten.arange.default, longest, dtype=torch.int64, device=device))  # [out, longest]
    inside = call(aten.lt.Tensor, places, call(aten.unsqueeze.default, end, 1))
    places = call(aten.where.self, inside, places, call(aten.unsqueeze.default, start, 1))
    read = call(aten.index_select.default, x, dim, call(aten.view.default, places, [-1]))
    windows = call(aten.unflatten.int, read, dim, [out, -1])  # [..., out, longest, ...]
    for _ in range(after):
        inside = call(aten.unsqueeze.default, inside, -1)
    if maximum:
        lowest = call(aten.scalar_tensor.default, float("-inf"), dtype=like.dtype, device=device)
        windows = call(aten.where.self, inside, windows, lowest)
        nan = call(aten.any.dim, call(aten.isnan.default, windows), dim + 1)  # ONNX Runtime's ReduceMax drops NaN
        top = call(aten.amax.default, windows, [dim + 1])
        not_a_number = call(aten.scalar_tensor.default, float("nan"), dtype=like.dtype, device=device)
        return call(aten.where.self, nan, not_a_number, top)
    zero = call(aten.scalar_tensor.default, 0.0, dtype=like.dtype, device=device)
    sums = call(aten.sum.dim_IntList, call(aten.where.self, inside, windows, zero), [dim + 1])
    lengths = call(aten._to_copy.default, call(aten.sub.Tensor, end, start), dtype=like.dtype)
    for _ in range(after):
        lengths = call(aten.unsqueeze.default, lengths, -1)
    return call(aten.div.Tensor, sums, lengths)
