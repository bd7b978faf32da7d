"""Spell composite ops pnnx has no ncnn layer for as the ops that define them.

A postprocess written by hand reaches for ``x.std(-1)``, ``torch.var_mean``, ``x.aminmax(dim=1)``,
``torch.diff``, ``torch.rot90``, ``x.tile(...)``, ``x.repeat_interleave(2, -1)``, ``torch.outer``
or ``torch.addcmul``. torch.export keeps each as one aten op; pnnx leaves it an ``aten::`` layer that
ncnn cannot create, and the op ran on the host, between two engines (or, where it was the whole
graph, lower() refused it). Each is, by its definition, ops ncnn has layers for:

    var(x, dims, correction)   sum(d * d, dims) / (N - correction), d = x - mean(x, dims, keepdim)
                               (mean(d * d, dims) when correction is 0); N the number of elements
                               reduced: a number, or where a reduced dim is dynamic sum(d * 0 + 1),
                               counted by the engine (a size read would be a host-made input): the
                               exact count, or NaN where d is not finite, as var is then
    std(...)                   sqrt(var(...))
    var_mean, std_mean         (var or std, mean(x, dims))
    aminmax(x, dim)            (amin(x, dim), amax(x, dim))
    any(m, dims), all(m, dims) amax(m, dims), amin(m, dims) of the bool m: max and min of bools
    count_nonzero(m, dims)     sum(m, dims) of a bool m (int64, as count_nonzero's)
    diff(x, n, dim)            x[1:] - x[:-1] along dim, n times, after cat(prepend, x, append)
    rot90(x, k, (a, b))        k = 1: flip(x, b) with a and b transposed; 2: flip(x, (a, b));
                               3: flip(x, a) transposed; 0: x
    tile(x, reps)              repeat(x, reps with leading ones up to x's rank)
    repeat_interleave(x, r, d) x.unsqueeze(d + 1) repeated r times there, dims d and d + 1 flattened
                               (the last of 4 dims: swapped with the one before it, both ways)
    outer(a, b)                a.unsqueeze(1) * b.unsqueeze(0)
    mse_loss, l1_loss, ...     the element-wise losses and broadcast_tensors (``loss_spellings``)
    addcmul(x, a, b, value)    x + value * a * b       addcdiv: x + value * a / b

The mean-of-squares spelling of var is the textbook two-pass variance; PyTorch computes Welford's
running form, so the two round differently (within float32 precision, not bit for bit). The others
compute the same operations PyTorch's kernels do. Bool results (any, all, count_nonzero of a
comparison) stay bool ops here; ``comparisons_as_arithmetic`` spells them as float arithmetic where
their readers take numbers.

Fires on float32 inputs (bool for any, all and count_nonzero; any dtype for the pure data movement:
rot90, tile, repeat_interleave with an int count; the last not where its copies would be a 4-D
per-image blob of a dynamic size, which ncnn's Tile shapes otherwise); other dtypes and forms stay,
with the reason logged.
"""

from __future__ import annotations

import logging
import math
import operator
from collections.abc import Callable
from typing import Any

import torch
from torch.fx.operator_schemas import normalize_function
from torch.fx.proxy import GraphAppendingTracer, Proxy

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import call_site, replaced_by
from fxdeploy.passes.ncnn import loss_spellings as losses
from fxdeploy.settings import Settings

logger = logging.getLogger(__name__)
aten = torch.ops.aten
Node = torch.fx.Node
_END = 2**63 - 1  # a slice to the end


def _dims(x: Proxy, dims: Any) -> list[int]:
    """The reduced dims, non-negative; None or [] is every dim (as var's and amin's)."""
    rank = x.node.meta["val"].dim()
    if dims is None or (isinstance(dims, (list, tuple)) and not dims):
        return list(range(rank))
    return [d % rank for d in ([dims] if isinstance(dims, int) else dims)]


def _variance(x: Proxy, dims: list[int], correction: float, keepdim: bool) -> Proxy:
    centered = aten.sub.Tensor(x, aten.mean.dim(x, dims, True))
    squares = aten.mul.Tensor(centered, centered)
    if correction == 0:
        return aten.mean.dim(squares, dims, keepdim)
    total = aten.sum.dim_IntList(squares, dims, keepdim)
    shape = x.node.meta["val"].shape
    if all(isinstance(shape[d], int) for d in dims):
        return aten.div.Tensor(total, math.prod(shape[d] for d in dims) - correction)
    # counted by the engine: 1 per element, NaN where x - mean(x) is not finite (var is NaN there too)
    count = aten.sum.dim_IntList(aten.add.Tensor(aten.mul.Tensor(centered, 0.0), 1.0), dims, keepdim)
    return aten.div.Tensor(total, aten.sub.Tensor(count, correction))


def _moments(root: bool, with_mean: bool) -> Callable[..., Any]:
    """var / std (``root``), alone or with the mean (``with_mean``)."""
    def spell(input: Proxy, dim: Any = None, unbiased: bool = True, correction: float | None = None,
              keepdim: bool = False) -> Any:
        dims = _dims(input, dim)
        correction = (1 if unbiased else 0) if correction is None else correction
        spread = _variance(input, dims, correction, keepdim)
        spread = aten.sqrt.default(spread) if root else spread
        return (spread, aten.mean.dim(input, dims, keepdim)) if with_mean else spread
    return spell


def _aminmax(input: Proxy, dim: int | None = None, keepdim: bool = False) -> tuple[Proxy, Proxy]:
    dims = [] if dim is None else [dim]
    return aten.amin.default(input, dims, keepdim), aten.amax.default(input, dims, keepdim)


def _extreme(op: Any) -> Callable[..., Proxy]:
    """any (``amax``) or all (``amin``) of a bool tensor."""
    def spell(input: Proxy, dim: Any = None, keepdim: bool = False) -> Proxy:
        return op(input, _dims(input, dim), keepdim)
    return spell


def _count_nonzero(input: Proxy, dim: Any = None) -> Proxy:
    return aten.sum.dim_IntList(input, _dims(input, dim), False)


def _diff(input: Proxy, n: int = 1, dim: int = -1, prepend: Any = None, append: Any = None) -> Proxy:
    parts = [p for p in (prepend, input, append) if p is not None]
    x = aten.cat.default(parts, dim) if len(parts) > 1 else input
    for _ in range(n):
        x = aten.sub.Tensor(aten.slice.Tensor(x, dim, 1, _END), aten.slice.Tensor(x, dim, 0, -1))
    return x


def _rot90(input: Proxy, k: int = 1, dims: Any = (0, 1)) -> Proxy:
    a, b = dims
    turns = k % 4
    if turns == 2:  # noqa: PLR2004 - a half turn
        return aten.flip.default(input, [a, b])
    if turns == 0:
        return aten.clone.default(input)
    return aten.transpose.int(aten.flip.default(input, [b] if turns == 1 else [a]), a, b)


def _tile(input: Proxy, dims: Any) -> Proxy:
    reps = [1] * (input.node.meta["val"].dim() - len(dims)) + list(dims)
    return aten.repeat.default(input, reps)


def _repeat_interleave(input: Proxy, repeats: int, dim: int | None = None, output_size: Any = None) -> Proxy:
    x, rank = input, input.node.meta["val"].dim()
    if dim is None:  # of the flattened input
        x, dim, rank = aten.reshape.default(input, [-1]), 0, 1
    dim = dim % rank
    if dim == rank - 1 and rank >= 4:  # noqa: PLR2004 - ncnn cannot load a new last axis of a per-image 3-D blob
        swapped = aten.transpose.int(x, dim - 1, dim)
        return aten.transpose.int(_interleaved(swapped, rank, repeats, dim - 1), dim - 1, dim)
    return _interleaved(x, rank, repeats, dim)


def _interleaved(x: Proxy, rank: int, repeats: int, dim: int) -> Proxy:
    """``x`` (of ``rank`` dims) with each element along ``dim`` repeated: copies on a new axis after it."""
    reps = [1] * (rank + 1)
    reps[dim + 1] = repeats
    return aten.flatten.using_ints(aten.repeat.default(aten.unsqueeze.default(x, dim + 1), reps), dim, dim + 1)


def _outer(input: Proxy, vec2: Proxy) -> Proxy:
    return aten.mul.Tensor(aten.unsqueeze.default(input, 1), aten.unsqueeze.default(vec2, 0))


def _addc(op: Any) -> Callable[..., Proxy]:
    """addcmul (``mul``) or addcdiv (``div``): ``x + value * a op b``, in PyTorch's order."""
    def spell(input: Proxy, tensor1: Proxy, tensor2: Proxy, value: float = 1) -> Proxy:
        scaled = tensor1 if value == 1 else aten.mul.Tensor(tensor1, value)
        return aten.add.Tensor(input, op(scaled, tensor2))
    return spell


_FLOAT32, _BOOL, _ANY = (torch.float32,), (torch.bool,), None
_SPELLINGS: dict[Any, tuple[Callable[..., Any], tuple[torch.dtype, ...] | None]] = {
    aten.var.dim: (_moments(False, False), _FLOAT32), aten.var.correction: (_moments(False, False), _FLOAT32),
    aten.std.dim: (_moments(True, False), _FLOAT32), aten.std.correction: (_moments(True, False), _FLOAT32),
    aten.var_mean.dim: (_moments(False, True), _FLOAT32), aten.var_mean.correction: (_moments(False, True), _FLOAT32),
    aten.std_mean.dim: (_moments(True, True), _FLOAT32), aten.std_mean.correction: (_moments(True, True), _FLOAT32),
    aten.aminmax.default: (_aminmax, _FLOAT32),
    aten.any.default: (_extreme(aten.amax.default), _BOOL), aten.any.dim: (_extreme(aten.amax.default), _BOOL),
    aten.any.dims: (_extreme(aten.amax.default), _BOOL), aten.all.default: (_extreme(aten.amin.default), _BOOL),
    aten.all.dim: (_extreme(aten.amin.default), _BOOL), aten.all.dims: (_extreme(aten.amin.default), _BOOL),
    aten.count_nonzero.default: (_count_nonzero, _BOOL), aten.count_nonzero.dim_IntList: (_count_nonzero, _BOOL),
    aten.diff.default: (_diff, _FLOAT32), aten.rot90.default: (_rot90, _ANY), aten.tile.default: (_tile, _ANY),
    aten.repeat_interleave.self_int: (_repeat_interleave, _ANY), aten.outer.default: (_outer, _FLOAT32),
    aten.addcmul.default: (_addc(aten.mul.Tensor), _FLOAT32), aten.addcdiv.default: (_addc(aten.div.Tensor), _FLOAT32),
    **{op: (spell, _FLOAT32) for op, spell in losses.SPELLINGS.items()},
}
"""op -> (its spelling, from the op's arguments by name; the dtypes of the tensors it fires on)."""


def composite_ops(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    tracer = GraphAppendingTracer(gm.graph)
    for node in list(gm.graph.nodes):
        reason = check(node)
        if reason is not None:
            if node.op == "call_function" and node.target in _SPELLINGS:
                logger.debug("composite_ops: %s stays a %s: %s", call_site(node), node.target, reason)
            continue
        arguments = normalize_function(node.target, node.args, node.kwargs, normalize_to_only_use_kwargs=True)
        proxied = torch.fx.node.map_arg(arguments.kwargs, lambda n: Proxy(n, tracer))
        before = set(gm.graph.nodes)
        with gm.graph.inserting_before(node):
            spelled = _SPELLINGS[node.target][0](**proxied)
        new = [n for n in gm.graph.nodes if n not in before]
        replaced_by(new, node)
        _replace(gm.graph, node, spelled)
        for inserted in reversed(new):  # readers first: var_mean's mean, where only its var is read
            if not inserted.users:
                gm.graph.erase_node(inserted)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def _replace(graph: torch.fx.Graph, node: Node, spelled: Any) -> None:
    """``node``'s readers read ``spelled`` (a tuple's items through their getitems)."""
    if isinstance(spelled, tuple):
        for user in list(node.users):
            user.replace_all_uses_with(spelled[user.args[1]].node)
            graph.erase_node(user)
    else:
        node.replace_all_uses_with(spelled.node)
    graph.erase_node(node)


def check(node: Node) -> str | None:
    """None when ``node`` is a composite op spelled here, on tensors of a dtype it spells; else why not."""
    if node.op != "call_function" or node.target not in _SPELLINGS:
        return "not a composite op spelled here"
    dtypes = _SPELLINGS[node.target][1]
    tensors = [a.meta.get("val") for a in node.all_input_nodes]
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        return "an input carries no tensor value"
    if dtypes is not None and any(t.dtype not in dtypes for t in tensors):
        return f"an input's dtype is not one of {[str(d) for d in dtypes]}"
    if isinstance(node.meta.get("val"), (tuple, list)) and any(u.target is not operator.getitem for u in node.users):
        return "a reader takes its tuple whole"
    if node.target is aten.repeat_interleave.self_int:
        return _interleave_check(node)
    if node.target in losses.SPELLINGS:
        arguments = normalize_function(node.target, node.args, node.kwargs, normalize_to_only_use_kwargs=True)
        return losses.check(node.target, arguments.kwargs)
    return None


def _interleave_check(node: Node) -> str | None:
    repeats, shape = node.args[1], node.args[0].meta["val"].shape
    if not isinstance(repeats, int) or isinstance(repeats, bool):
        return f"its repeat count {repeats!r} is not a number"
    if len(shape) >= 4 and any(isinstance(size, torch.SymInt) for size in shape[1:]):  # noqa: PLR2004
        return "its copies would be a per-image 4-D blob of a dynamic size, whose Tile ncnn shapes otherwise"
    return None
