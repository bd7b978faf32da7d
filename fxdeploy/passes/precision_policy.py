"""Reduced precision policy: run the network in fp16 or bf16, keep scores, box decoding and NMS in fp32.

With ``settings.precision`` "fp16" (or "bf16") every float op runs in that dtype except:
- ops whose fp16 error changes decisions: sigmoid, softmax, log_softmax, and the NMS ops;
- the light ops that feed NMS (box decoding: arithmetic, exp, concatenation, reshapes) and the
  light ops downstream of an excluded op (score post-processing).
Heavy ops (convolutions, matmuls, attention, norms) always take the reduced dtype. Casts are inserted at the
region boundaries; graph inputs and outputs keep their dtypes, so callers see no change. The
record of what ran in which precision goes to the graph record (``passes/record.py``), then the manifest.
"""

from __future__ import annotations

from collections import Counter

import torch

from fxdeploy.ops.names import FXDEPLOY_NMS, is_nms
from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import refresh_meta
from fxdeploy.passes.record import update
from fxdeploy.settings import Settings

aten = torch.ops.aten
EXCLUDED = frozenset(
    {
        "aten.sigmoid.default", "aten._softmax.default", "aten.softmax.int", "aten._log_softmax.default",
        "aten.log_softmax.int", *FXDEPLOY_NMS,
    }
)
HEAVY = (
    "aten.convolution", "aten.conv", "aten.linear", "aten.addmm", "aten.mm", "aten.bmm", "aten.matmul",
    "aten.scaled_dot_product_attention", "aten._native_batch_norm", "aten.batch_norm", "aten.layer_norm",
    "aten.native_layer_norm", "aten.group_norm", "aten.max_pool", "aten.avg_pool", "aten.adaptive_avg_pool",
    "aten.mean",
)
REDUCED = {"fp16": torch.float16, "bf16": torch.bfloat16}
"""settings.precision -> the dtype the network runs in (fp32: the pass changes nothing)."""


def precision_policy(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    half = REDUCED.get(settings.precision)
    if half is None:
        return PassResult(gm, False)
    fp32 = _fp32_nodes(gm)
    graph = gm.graph
    casts: dict[tuple[torch.fx.Node, torch.dtype], torch.fx.Node] = {}
    _convert_parameters(gm, fp32, half)
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        want = torch.float32 if node in fp32 else half
        for source in list(node.all_input_nodes):
            if _is_float32(source) and _dtype_after(gm, source, fp32, half) != want:
                node.replace_input_with(source, _cast(graph, source, want, casts))
    output = next(n for n in graph.nodes if n.op == "output")
    for source in list(output.all_input_nodes):
        if _is_float32(source) and _dtype_after(gm, source, fp32, half) == half:
            output.replace_input_with(source, _cast(graph, source, torch.float32, casts))
    refresh_meta(gm)
    histogram = Counter(str(n.target) for n in fp32 if n.op == "call_function")
    reduced = sum(1 for n in graph.nodes if n.op == "call_function" and n not in fp32 and n not in casts.values())
    update(gm, precision={
        "policy": settings.precision, f"{settings.precision}_ops": reduced, "fp32_ops": dict(sorted(histogram.items()))
    })
    return PassResult(gm, True)


def _fp32_nodes(gm: torch.fx.GraphModule) -> set[torch.fx.Node]:
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    keep = {n for n in nodes if str(n.target) in EXCLUDED}
    frontier = [a for n in nodes if is_nms(n) for a in n.all_input_nodes]
    while frontier:  # box decoding: light producers of NMS inputs
        node = frontier.pop()
        if node.op == "call_function" and node not in keep and not _heavy(node):
            keep.add(node)
            frontier.extend(node.all_input_nodes)
    frontier = [u for n in list(keep) for u in n.users]
    while frontier:  # score post-processing: light consumers of excluded ops
        node = frontier.pop()
        if node.op == "call_function" and node not in keep and not _heavy(node):
            keep.add(node)
            frontier.extend(node.users)
    return keep


def _heavy(node: torch.fx.Node) -> bool:
    return str(node.target).startswith(HEAVY)


def _is_float32(node: torch.fx.Node) -> bool:
    value = node.meta.get("val")
    return isinstance(value, torch.Tensor) and value.dtype == torch.float32


CREATES_FLOAT32 = ("aten.arange", "aten.full", "aten.zeros", "aten.ones", "aten.empty", "aten.scalar_tensor",
                  "aten.lift_fresh_copy", "aten._to_copy", "aten.to.dtype", "aten.rand", "aten.linspace")
"""Ops whose float32 output no input makes reduced: ``arange(n).float()`` (``to.dtype``) included."""


def _dtype_after(
    gm: torch.fx.GraphModule, node: torch.fx.Node, fp32: set[torch.fx.Node], half: torch.dtype
) -> torch.dtype:
    """The dtype a float32 value has once the policy applies (graph inputs stay float32)."""
    if node.op == "get_attr":
        return _param_dtype(gm, node)
    if node.op != "call_function" or node in fp32 or str(node.target).startswith(CREATES_FLOAT32):
        return torch.float32
    return half


def _convert_parameters(gm: torch.fx.GraphModule, fp32: set[torch.fx.Node], half: torch.dtype) -> None:
    """Weights read only by reduced-precision ops are stored so (half the artifact, no runtime cast)."""
    for node in gm.graph.nodes:
        if node.op != "get_attr" or not _is_float32(node):
            continue
        if all(user not in fp32 and user.op == "call_function" for user in node.users):
            owner, _, name = node.target.rpartition(".")
            module = gm.get_submodule(owner) if owner else gm
            value = getattr(module, name)
            reduced = value.detach().to(half)
            if isinstance(value, torch.nn.Parameter):
                setattr(module, name, torch.nn.Parameter(reduced, requires_grad=False))
            else:
                setattr(module, name, reduced)


def _param_dtype(gm: torch.fx.GraphModule, node: torch.fx.Node) -> torch.dtype:
    owner, _, name = node.target.rpartition(".")
    return getattr(gm.get_submodule(owner) if owner else gm, name).dtype


def _cast(
    graph: torch.fx.Graph, source: torch.fx.Node, dtype: torch.dtype,
    casts: dict[tuple[torch.fx.Node, torch.dtype], torch.fx.Node],
) -> torch.fx.Node:
    if (source, dtype) not in casts:
        with graph.inserting_after(source):
            casts[(source, dtype)] = graph.call_function(aten._to_copy.default, (source,), {"dtype": dtype})
    return casts[(source, dtype)]
