"""Fold what depends on no input into constants: a head's anchor grid made in forward.

Ultralytics' Detect head builds its anchors on every call from the feature sizes:
``arange``, ``meshgrid``, ``stack``, ``full`` and ``type_as``. At static sizes (ncnn's engine
takes one image at a fixed height and width) these are the same numbers on every call, and pnnx
writes ``meshgrid`` and ``type_as`` as layers ncnn cannot run. Folded, the grid is one constant
blob (a MemoryData layer in ncnn).

A node folds when it reads no graph input: a factory op (``arange``, ``full``...), or an op on
folded nodes and tensor constants. Only folded tensors read by the rest of the graph become
buffers, up to ``MAX_ELEMENTS`` each. Random and uninitialized factories (``rand``, ``empty``)
never fold, and neither does anything whose size is symbolic, or anything written in place (a
batch buffer that images are copied into). Parameters stay as they are: folding ``weight.t()``
would copy the weights for no gain.
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import attribute, written_in_place
from fxdeploy.settings import Settings

aten = torch.ops.aten
Node = torch.fx.Node
# Arguments read for their dtype, device and shape only: ``arange(n).type_as(features)`` is as
# constant as ``arange(n)``, and so are torchvision's RPN levels ``levels.expand_as(objectness)``.
_METADATA_ONLY = {
    aten.type_as.default: 1, aten.expand_as.default: 1, aten.zeros_like.default: 0, aten.ones_like.default: 0,
    aten.full_like.default: 0,
    aten.new_zeros.default: 0, aten.new_ones.default: 0, aten.new_full.default: 0,
}
MAX_ELEMENTS = 1 << 18
"""A folded tensor is stored in the artifact: an anchor grid (8400 x 2 at 640 px) is, a feature
map of zeros is not."""
_NEVER = ("rand", "randn", "randint", "randperm", "bernoulli", "normal", "uniform", "empty", "dropout",
          "native_dropout")


def fold_constants(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    values: dict[Node, object] = {}
    written = written_in_place(gm.graph)
    for node in gm.graph.nodes:
        if _static_size(node):
            values[node] = node.meta["val"]  # ``x.size(0)`` at a static shape: a number
        elif check(gm, node, values, written) is None:
            values[node] = _evaluate(gm, node, values)
    frontier = [
        n for n in values
        if n.op == "call_function" and isinstance(values[n], torch.Tensor) and any(u not in values for u in n.users)
    ]
    for number, node in enumerate(frontier):
        name = _free_name(gm, f"_folded_{number}")
        gm.register_buffer(name, values[node].detach().clone())
        with gm.graph.inserting_before(node):
            constant = gm.graph.get_attr(name)
        constant.meta = dict(node.meta)
        node.replace_all_uses_with(constant)
    if frontier:
        gm.graph.eliminate_dead_code()
    return PassResult(gm, bool(frontier))


def check(
    gm: torch.fx.GraphModule, node: Node, values: dict[Node, object], written: set[Node] | None = None
) -> str | None:
    """None when ``node`` folds (given the nodes folded before it and those written in place),
    else why not."""
    if node in (written or set()):
        return "written in place"
    if node.op == "get_attr":
        return "a parameter" if isinstance(attribute(gm, node), torch.nn.Parameter) else None
    if node.op != "call_function":
        return f"a {node.op}"
    if any(n not in values for n in _read(node)):
        return "reads a graph input or a parameter"
    name = getattr(node.target, "__name__", str(node.target)).split(".")[0]
    if name in _NEVER:
        return f"{name} is random or uninitialized"
    value = node.meta.get("val")
    shapes = value if isinstance(value, (list, tuple)) else [value]
    if any(isinstance(v, torch.Tensor) and not all(isinstance(s, int) for s in v.shape) for v in shapes):
        return "a symbolic size"
    if isinstance(value, torch.SymInt):
        return "a symbolic size"
    if any(_symbolic(n) for n in node.all_input_nodes if n not in values):
        return "reads the metadata of a tensor of symbolic size"  # ``new_ones(x, [3])`` at a dynamic x
    if sum(v.numel() for v in shapes if isinstance(v, torch.Tensor)) > MAX_ELEMENTS:
        return f"over {MAX_ELEMENTS} elements: cheaper to compute than to store"
    return None


def _symbolic(node: Node) -> bool:
    value = node.meta.get("val")
    return isinstance(value, torch.Tensor) and not all(isinstance(s, int) for s in value.shape)


def _static_size(node: Node) -> bool:
    return node.op == "call_function" and type(node.meta.get("val")) in (int, float, bool)


def _read(node: Node) -> list[Node]:
    """The inputs whose values the node reads (not only their dtype and shape)."""
    position = _METADATA_ONLY.get(node.target)
    return [n for i, n in enumerate(node.args) if isinstance(n, Node) and i != position] + [
        n for n in node.all_input_nodes if n not in node.args
    ]


def _evaluate(gm: torch.fx.GraphModule, node: Node, values: dict[Node, object]) -> object:
    if node.op == "get_attr":
        return attribute(gm, node)

    def value(n: Node) -> object:
        if n in values:
            return values[n]
        fake = n.meta["val"]  # read for its metadata only
        return torch.empty(fake.shape, dtype=fake.dtype, device=fake.device)

    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), value)
    return node.target(*args, **kwargs)


def _free_name(gm: torch.fx.GraphModule, name: str) -> str:
    while hasattr(gm, name):
        name += "_"
    return name
