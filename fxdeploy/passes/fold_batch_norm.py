"""Fold an inference BatchNorm into the convolution before it (TorchScript's pipeline).

An eval BatchNorm is an affine map per channel, ``y = (x - mean) * g + beta`` with
``g = weight / sqrt(var + eps)``; over a convolution's output ``x = W * in + b`` that is the
convolution with weights ``W * g`` (per output channel) and bias ``(b - mean) * g + beta``.
ONNX runtimes and pnnx fold it themselves; a TorchScript artifact runs every op it is given, and
YOLO11n's 88 BatchNorms each cost one more pass over an activation.

``check`` says why a pair may be folded, and it must hold wherever the rule fires:
- the BatchNorm is in inference form (``training`` false, or ``_native_batch_norm_legit_no_training``);
- the convolution is not transposed (its weights hold output channels on dim 0) and its output
  feeds only this BatchNorm (no other reader sees the unfolded values), of which only the
  normalized output is read;
- every weight, bias and statistic is a constant of the module (a ``get_attr``) that no op in the
  graph writes in place, so folding them ahead of time computes what the graph would.
The folded tensors are new attributes, computed in float64 and stored in the weights' dtype; the
user's parameters are left as they were.
"""

from __future__ import annotations

import operator

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.settings import Settings

aten = torch.ops.aten
CONVS = frozenset({aten.conv1d.default, aten.conv2d.default, aten.conv3d.default, aten.convolution.default})
# (op, index of eps in its arguments)
NORMS = {aten.batch_norm.default: 7, aten._native_batch_norm_legit_no_training.default: 6}


def fold_batch_norm(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    written = _written_in_place(gm)
    folded = 0
    for norm in list(gm.graph.nodes):
        if norm.op != "call_function" or norm.target not in NORMS:
            continue
        if check(gm, norm, written) is None:
            _fold(gm, norm, folded)
            folded += 1
    return PassResult(gm, folded > 0)


def check(gm: torch.fx.GraphModule, norm: torch.fx.Node, written: set[str]) -> str | None:
    """None where ``norm`` may be folded into the convolution before it; else why not."""
    conv = norm.args[0]
    if not isinstance(conv, torch.fx.Node) or conv.op != "call_function" or conv.target not in CONVS:
        return "the BatchNorm does not read a convolution"
    if conv.target is aten.convolution.default and conv.args[6]:
        return "a transposed convolution keeps output channels on dim 1 of its weights"
    if len(conv.users) != 1:
        return "the convolution's unnormalized output has other readers"
    if norm.target is aten.batch_norm.default and norm.args[5]:
        return "the BatchNorm is in training mode"
    if len(norm.args) <= NORMS[norm.target]:
        return "the BatchNorm's arguments are not all positional"
    legit = norm.target is not aten.batch_norm.default
    if legit and any(u.target is not operator.getitem or u.args[1] != 0 for u in norm.users):
        return "the BatchNorm's saved statistics are read"
    constants = [conv.args[1], _arg(conv, 2), *norm.args[1:5]]
    for value in constants:
        if value is None:
            continue
        if not isinstance(value, torch.fx.Node) or value.op != "get_attr":
            return f"{value} is not a constant of the module"
        if value.target in written:
            return f"{value.target} is written in place by the graph"
    if constants[4] is None or constants[5] is None:
        return "the BatchNorm has no running statistics"
    return None


def _fold(gm: torch.fx.GraphModule, norm: torch.fx.Node, index: int) -> None:
    conv = norm.args[0]
    old = [conv.args[1], _arg(conv, 2), *norm.args[1:5]]  # get_attr nodes or None (check)
    weight, bias = _attr(gm, conv.args[1]), _attr(gm, _arg(conv, 2))
    gamma, beta, mean, var = (_attr(gm, node) for node in norm.args[1:5])
    eps = float(norm.args[NORMS[norm.target]])
    scale = torch.rsqrt(var.double() + eps) * (gamma.double() if gamma is not None else 1.0)
    shift = (beta.double() if beta is not None else 0.0) - mean.double() * scale
    if bias is not None:
        shift = shift + bias.double() * scale
    folded = {
        "weight": (weight.double() * scale.reshape(-1, *[1] * (weight.dim() - 1))).to(weight.dtype),
        "bias": shift.to(weight.dtype),
    }
    like = {"weight": conv.args[1], "bias": norm.args[4]}  # same shapes: their metadata carries over
    nodes = {}
    for key, tensor in folded.items():
        name = f"_fxdeploy_folded_bn{index}_{key}"
        gm.register_buffer(name, tensor)
        with gm.graph.inserting_before(conv):
            nodes[key] = gm.graph.get_attr(name)
        if "val" in like[key].meta:
            nodes[key].meta["val"] = like[key].meta["val"].to(tensor.dtype)
    args, kwargs = list(conv.args), dict(conv.kwargs)
    args[1] = nodes["weight"]
    if len(args) > 2:
        args[2] = nodes["bias"]
    elif "bias" in kwargs:
        kwargs["bias"] = nodes["bias"]
    else:  # positional, where later passes (precision_policy's casts) read a convolution's weights
        args.append(nodes["bias"])
    conv.args, conv.kwargs = tuple(args), kwargs
    out = norm if norm.target is aten.batch_norm.default else next(iter(norm.users))
    if "val" in out.meta:
        conv.meta["val"] = out.meta["val"]
    out.replace_all_uses_with(conv)
    if out is not norm:
        gm.graph.erase_node(out)
    gm.graph.erase_node(norm)
    for node in old:
        if node is not None and not node.users:  # the artifact keeps no copy of unused tensors
            gm.graph.erase_node(node)


def _arg(node: torch.fx.Node, index: int) -> torch.fx.Node | None:
    return node.args[index] if len(node.args) > index else node.kwargs.get("bias")


def _attr(gm: torch.fx.GraphModule, node: torch.fx.Node | None) -> torch.Tensor | None:
    if node is None:
        return None
    owner, _, leaf = node.target.rpartition(".")
    return getattr(gm.get_submodule(owner) if owner else gm, leaf).detach()


def _written_in_place(gm: torch.fx.GraphModule) -> set[str]:
    """Attributes some op in the graph may write (a mutable schema argument, or copy_)."""
    written = set()
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        schema = getattr(node.target, "_schema", None)
        for i, argument in enumerate(schema.arguments if schema is not None else ()):
            value = node.args[i] if i < len(node.args) else node.kwargs.get(argument.name)
            writes = argument.alias_info is not None and argument.alias_info.is_write
            if writes and isinstance(value, torch.fx.Node) and value.op == "get_attr":
                written.add(value.target)
    return written

