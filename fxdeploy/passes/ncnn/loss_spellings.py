"""The element-wise losses and ``broadcast_tensors`` as the ops that define them, for ``composite_ops``.

A matching cost or a distance written with ``F.l1_loss(a, b, reduction="none")`` (``mse_loss``,
``smooth_l1_loss``, ``huber_loss``) is exported as ``broadcast_tensors`` and the loss op; pnnx left
both as ``aten::`` layers ncnn cannot create, and lower() refused a graph of them:

    broadcast_tensors(a, b)         a and b, each expanded to the shape they broadcast to
    mse_loss(a, b)                  (a - b) * (a - b)
    l1_loss(a, b)                   |a - b|
    smooth_l1_loss(a, b, beta)      0.5 * m * m / beta + (|a - b| - m),  m = min(|a - b|, beta)
    huber_loss(a, b, delta)         0.5 * m * m + delta * (|a - b| - m), m = min(|a - b|, delta)

then the reduction (none, mean, sum). The piecewise losses without a branch: below the threshold
``m`` is the difference and the linear part 0; above it ``m`` is the threshold, and the quadratic
part its value there. mse and l1 are PyTorch's own operations; the piecewise ones round otherwise
(within float32 precision), and a beta of 0 (smooth_l1 is then l1) stays.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx.proxy import Proxy

aten = torch.ops.aten
_REDUCTIONS = {0: lambda x: x, 1: aten.mean.default, 2: aten.sum.default}


def broadcast_tensors(tensors: list[Proxy]) -> tuple[Proxy, ...]:
    """Each tensor expanded to the shape they broadcast to (as it is where it has that shape)."""
    return tuple(tensor if sizes is None else aten.expand.default(tensor, sizes)
                 for tensor, sizes in zip(tensors, _expansions(tensors), strict=True))


def _expansions(tensors: list[Any]) -> list[list[Any] | None]:
    """Each tensor's sizes to expand to (-1: its own), or None where it has the broadcast shape."""
    shapes = [t.node.meta["val"].shape if isinstance(t, Proxy) else t.meta["val"].shape for t in tensors]
    target = torch.broadcast_shapes(*shapes)
    sizes: list[list[Any] | None] = []
    for shape in shapes:
        own = [None] * (len(target) - len(shape)) + [str(size) for size in shape]  # symbols compared by name
        expanded = [-1 if size == str(want) else want for size, want in zip(own, target, strict=True)]
        sizes.append(None if expanded == [-1] * len(target) else expanded)
    return sizes


def mse_loss(input: Proxy, target: Proxy, reduction: int = 1) -> Proxy:
    difference = aten.sub.Tensor(input, target)
    return _REDUCTIONS[reduction](aten.mul.Tensor(difference, difference))


def l1_loss(input: Proxy, target: Proxy, reduction: int = 1) -> Proxy:
    return _REDUCTIONS[reduction](aten.abs.default(aten.sub.Tensor(input, target)))


def smooth_l1_loss(input: Proxy, target: Proxy, reduction: int = 1, beta: float = 1.0) -> Proxy:
    distance, capped = _capped(input, target, beta)
    quadratic = aten.div.Tensor(aten.mul.Tensor(aten.mul.Tensor(capped, capped), 0.5), beta)
    return _REDUCTIONS[reduction](aten.add.Tensor(quadratic, aten.sub.Tensor(distance, capped)))


def huber_loss(input: Proxy, target: Proxy, reduction: int = 1, delta: float = 1.0) -> Proxy:
    distance, capped = _capped(input, target, delta)
    quadratic = aten.mul.Tensor(aten.mul.Tensor(capped, capped), 0.5)
    linear = aten.mul.Tensor(aten.sub.Tensor(distance, capped), delta)
    return _REDUCTIONS[reduction](aten.add.Tensor(quadratic, linear))


def _capped(input: Proxy, target: Proxy, threshold: float) -> tuple[Proxy, Proxy]:
    distance = aten.abs.default(aten.sub.Tensor(input, target))
    return distance, aten.clamp.default(distance, None, threshold)


def check(target: Any, arguments: dict[str, Any]) -> str | None:
    """Why a loss or ``broadcast_tensors`` stays (None: it is spelled); ``arguments`` by name, as nodes."""
    if target is aten.broadcast_tensors.default:
        needed = [size for sizes in _expansions(arguments["tensors"]) for size in sizes or ()]
        return "a size it broadcasts to is dynamic" if any(isinstance(s, torch.SymInt) for s in needed) else None
    if arguments.get("reduction", 1) not in _REDUCTIONS:
        return f"its reduction {arguments['reduction']!r} is not none, mean or sum"
    if target is aten.smooth_l1_loss.default and not arguments.get("beta", 1.0) > 0:
        return "its beta is not positive (smooth_l1 is then l1)"
    return None


SPELLINGS = {
    aten.broadcast_tensors.default: broadcast_tensors, aten.mse_loss.default: mse_loss,
    aten.l1_loss.default: l1_loss, aten.smooth_l1_loss.default: smooth_l1_loss,
    aten.huber_loss.default: huber_loss,
}
"""op -> its spelling, from the op's arguments by name (float32 tensors)."""
