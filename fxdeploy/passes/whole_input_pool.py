"""An average pool whose window covers the whole input is a global mean.

transformers' EfficientNet pools with ``AvgPool2d(hidden_dim, ceil_mode=True)``: a 1280 (or 320)
pixel window over a 2 x 2 to 7 x 7 map, one output pixel. OpenVINO's CPU plugin refuses a kernel
larger than its input, and ncnn's pooling gives NaN there. Without padding, the one window's
divisor is the input's own area (the window is clipped to the input, ``count_include_pad`` or
not), so the pool is ``mean(x, [-2, -1], keepdim=True)``, which every runtime has.
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.settings import Settings

aten = torch.ops.aten


def whole_input_pool(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if check(node) is not None:
            continue
        with gm.graph.inserting_before(node):
            mean = gm.graph.call_function(aten.mean.dim, (node.args[0], [-2, -1], True))
        mean.meta.update(node.meta)
        node.replace_all_uses_with(mean)
        gm.graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def check(node: torch.fx.Node) -> str | None:
    """None when ``node`` is a 2-D average pool whose one window covers its whole input, else why not."""
    if node.op != "call_function" or node.target is not aten.avg_pool2d.default:
        return "not aten.avg_pool2d"
    x, kernel = node.args[0], list(node.args[1])
    stride = list(node.args[2]) if len(node.args) > 2 and node.args[2] else kernel
    padding = list(node.args[3]) if len(node.args) > 3 else [0, 0]
    divisor = node.args[6] if len(node.args) > 6 else node.kwargs.get("divisor_override")
    value, out = x.meta.get("val"), node.meta.get("val")
    if not isinstance(value, torch.Tensor) or not isinstance(out, torch.Tensor):
        return "no shapes recorded"
    size = [_bounds(s) for s in value.shape[-2:]]
    if any(bound is None for bound in size):
        return f"input size {list(value.shape[-2:])} has no known bound"
    if any(p != 0 for p in padding) or divisor is not None:
        return "padded, or with a divisor override: the window's divisor is not the input's area"
    kernel = kernel * 2 if len(kernel) == 1 else kernel
    covered = all(k >= high for k, (_, high) in zip(kernel, size, strict=True))
    if not covered or any(_bounds(s) != (1, 1) for s in out.shape[-2:]):
        return f"window {kernel} (stride {stride}) does not cover the input {size} in one output pixel"
    return None


def _bounds(size: int | torch.SymInt) -> tuple[int, int] | None:
    """(min, max) of a size: itself where static; a dynamic one's range from its shape env."""
    if isinstance(size, int):
        return size, size
    try:
        bound = size.node.shape_env.bound_sympy(size.node.expr)
        return int(bound.lower), int(bound.upper)
    except (AttributeError, TypeError, ValueError, OverflowError):  # unbounded, or no shape env
        return None
