"""A ceil-mode average pool that counts the padding divides by what its window holds of the padded input.

torch's ``avg_pool2d(x, k, s, p, ceil_mode=True, count_include_pad=True)`` divides each window's
sum by the number of its elements inside the padded input, ``[-p, h + p)``: the last window, which
ceil mode lets hang past that, counts only its part inside. ncnn (pnnx's ``pad_mode`` full) and
OpenVINO count the part past the padding too: at a size where the last window hangs over (an odd
``h`` for ``k = s = 2``), ncnn's last row and column are off by up to half. Zero padding ``x`` by
``p`` first, then pooling with no padding and ``count_include_pad=False``, divides by the same
count (the window's part inside ``[0, h + 2p)``) every runtime computes alike.

The two pools have the same windows wherever their ceil-mode output sizes agree. Both start from
``ceil((h + 2p - k) / s) + 1``; torch drops the last window where it would start at ``h + p`` or
past it, the padded pool where it would start at ``h + 2p`` or past it. The last window starts
before ``h + 2p - k + s``, so where ``p <= k - s`` neither drops it, and where ``p = 0`` they drop
it alike: the rewrite fires only there (every dim), at any size, static or dynamic.
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.pool_divisors import POOLS, pool_arguments
from fxdeploy.settings import Settings

aten = torch.ops.aten


def ceil_pool_counts(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if check(node) is not None:
            continue
        x, kernel, stride, padding, _, _, _ = pool_arguments(node)
        created = []
        with gm.graph.inserting_before(node):
            if any(padding):
                pads = [p for d in reversed(range(len(kernel))) for p in (padding[d], padding[d])]
                x = gm.graph.call_function(aten.constant_pad_nd.default, (x, pads, 0.0))
                created.append(x)
            pool = gm.graph.call_function(node.target, (x, kernel, stride, [0] * len(kernel), True, False, None))
        for new in (*created, pool):
            new.meta.update(node.meta)
        node.replace_all_uses_with(pool)
        gm.graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def check(node: torch.fx.Node) -> str | None:
    """None when ``node`` is a ceil-mode average pool that counts the padding, with no divisor
    override, whose padding in every dim is 0 or at most its kernel less its stride; else why not."""
    if node.op != "call_function" or node.target not in POOLS:
        return "not aten.avg_pool2d or aten.avg_pool3d"
    _, kernel, stride, padding, ceil_mode, include_pad, divisor = pool_arguments(node)
    if not ceil_mode or not include_pad:
        return "not ceil_mode with count_include_pad: every window's count is the runtimes' own"
    if divisor is not None:
        return "a divisor override (pool_divisors' to rewrite)"
    for k, s, p in zip(kernel, stride, padding, strict=True):
        if p != 0 and p > k - s:
            return f"padding {p} over kernel {k} less stride {s}: torch may drop a last window the padded pool keeps"
    return None
