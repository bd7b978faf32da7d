"""An average pool with a ``divisor_override`` is a plain average pool, scaled.

``F.avg_pool2d(x, k, divisor_override=d)`` divides each window's sum by ``d``. ONNX's
AveragePool has no divisor: torch.onnx drops the override and writes the plain pool (the artifact
is off by ``prod(k) / d``; lower()'s check refused it), and pnnx writes a pooling layer ncnn fails
to load. Where every window lies inside the padded input (``ceil_mode`` off, or on but adding no
window), ``count_include_pad=True`` divides every window's sum by ``prod(k)``, so the override is
that pool times ``prod(k) / d``. A ceil-mode pool whose last window hangs past the padding divides
the sum of what the window holds by ``d`` too: the input is padded with zeros that far first (at
static sizes; at a dynamic size it is left as it is, and the check refuses what the runtime gets
wrong).
"""

from __future__ import annotations

import math

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.settings import Settings

aten = torch.ops.aten
POOLS = {aten.avg_pool2d.default: 2, aten.avg_pool3d.default: 3}


def pool_divisors(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if check(node) is not None:
            continue
        x, kernel, stride, padding, _, _, divisor = pool_arguments(node)
        extra = _past_padding(node)
        with gm.graph.inserting_before(node):
            if any(extra):  # zeros where the ceil-mode windows hang past the padding: each window whole
                pads = [p for d in reversed(range(len(kernel))) for p in (padding[d], padding[d] + extra[d])]
                x = gm.graph.call_function(aten.constant_pad_nd.default, (x, pads, 0.0))
                padding = [0] * len(kernel)
            pool = gm.graph.call_function(node.target, (x, kernel, stride, padding, False, True, None))
            scaled = gm.graph.call_function(aten.mul.Tensor, (pool, math.prod(kernel) / divisor))
        for new in (x, pool, scaled) if any(extra) else (pool, scaled):
            new.meta.update(node.meta)
        node.replace_all_uses_with(scaled)
        gm.graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def check(node: torch.fx.Node) -> str | None:
    """None when ``node`` is an average pool with a divisor override at static sizes, or whose
    windows all lie inside the padded input, else why it is left alone."""
    if node.op != "call_function" or node.target not in POOLS:
        return "not aten.avg_pool2d or aten.avg_pool3d"
    x, kernel, stride, padding, ceil_mode, _, divisor = pool_arguments(node)
    if divisor is None:
        return "no divisor override"
    if not isinstance(divisor, int) or divisor == 0:
        return f"divisor override {divisor!r} is not a nonzero number"
    if not ceil_mode:
        return None
    if _past_padding(node) is None:
        return "ceil_mode at a dynamic size: the last window may hang past the padding, where its divisor is clipped"
    return None


def _past_padding(node: torch.fx.Node) -> list[int] | None:
    """How far, per pooled dim, a ceil-mode pool's last window reaches past the padded input (a
    divisor override divides its sum of the elements there, as of a whole window of zeros); zeros
    without ceil_mode; None where the sizes are not static."""
    x, kernel, stride, padding, ceil_mode, _, _ = pool_arguments(node)
    rank = POOLS[node.target]
    if not ceil_mode:
        return [0] * rank
    value, out = x.meta.get("val"), node.meta.get("val")
    if not isinstance(value, torch.Tensor) or not isinstance(out, torch.Tensor):
        return None
    sizes, outs = value.shape[-rank:], out.shape[-rank:]
    if not all(isinstance(s, int) for s in (*sizes, *outs)):
        return None
    return [max((o - 1) * st + k - (s + 2 * p), 0) for s, o, k, st, p in zip(sizes, outs, kernel, stride, padding,
                                                                                 strict=True)]


def pool_arguments(
    node: torch.fx.Node,
) -> tuple[torch.fx.Node, list[int], list[int], list[int], bool, bool, int | None]:
    """(input, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override), each
    list at the pool's rank (torch's defaults: stride the kernel, padding 0)."""
    rank = POOLS[node.target]
    names = ("self", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")
    defaults = (None, None, [], 0, False, True, None)
    values = [node.args[i] if i < len(node.args) else node.kwargs.get(n, d)
              for i, (n, d) in enumerate(zip(names, defaults, strict=True))]
    x, kernel, stride, padding, ceil_mode, include_pad, divisor = values

    def full(v: object) -> list[int]:
        items = list(v) if isinstance(v, (list, tuple)) else [v]
        return items * rank if len(items) == 1 else items

    kernel = full(kernel)
    return x, kernel, full(stride) if stride else kernel, full(padding), ceil_mode, include_pad, divisor
