"""Decisions at their edge: the model run with every float comparison tilted, as a referee.

``y > 0.5`` on a sigmoid whose input is near zero is decided by the last bit of ``y``: ONNX
Runtime's and OpenVINO's Sigmoid are approximations a few ulps from torch's, so such an element
can be on the other side of the threshold in the artifact, and what the model computes from it
(``y * (y > 0.5)``, a mask) differs by a whole step. The artifact is not wrong there: float noise
decided, as the detections' rules say for a score at its threshold (docs/checking.md).

So where lower()'s check finds a tensor past its tolerance, the model runs twice more with each
comparison of floats (``gt``, ``ge``, ``lt``, ``le``) tilted by ``BAND`` relative to its operands:
once answering True within the band of its threshold ("lenient"), once False ("strict"). An
element the artifact gets past the tolerance is excused where the two tilted runs disagree there
(its value hangs on a decision at its edge) and the artifact agrees with one of them. A wrong
artifact still fails: where it differs from eager off an edge, neither tilted run agrees with it.
The tilt is a dispatch mode around the referee's own runs only; the model is not changed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

BAND = 4e-6
"""Relative to the larger operand (at least 1): a few float32 ulps of a sum of many terms, the
distance between two runtimes' values of one expression."""
_GREATER = (aten.gt.Tensor, aten.gt.Scalar, aten.ge.Tensor, aten.ge.Scalar)
_LESS = (aten.lt.Tensor, aten.lt.Scalar, aten.le.Tensor, aten.le.Scalar)


class _Tilted(TorchDispatchMode):
    """Every comparison of floats answered as if its threshold moved by the band: toward True
    (``lenient``) or toward False."""

    def __init__(self, lenient: bool) -> None:
        super().__init__()
        self.lenient = lenient

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        greater, less = func in _GREATER, func in _LESS
        if not (greater or less) or kwargs or not _floats(*args):
            return func(*args, **kwargs)
        a, b = args
        magnitude = torch.maximum(a.abs(), torch.as_tensor(b, dtype=a.dtype).abs())
        band = BAND * magnitude.clamp(min=1.0)
        if greater:
            return torch.ge(a, b - band) if self.lenient else torch.gt(a, b + band)
        return torch.le(a, b + band) if self.lenient else torch.lt(a, b - band)


def _floats(a: Any, b: Any) -> bool:
    """A float tensor compared with a number or a tensor (``y > 0`` compares with an int)."""
    return isinstance(a, torch.Tensor) and a.is_floating_point() and isinstance(b, (int, float, torch.Tensor))


def tilted(eager_fn: Callable[[list[torch.Tensor]], Any]) -> list[Callable[[list[torch.Tensor]], Any]]:
    """``eager_fn`` run leniently and strictly at its comparisons' edges (see the module's doc)."""

    def run(lenient: bool) -> Callable[[list[torch.Tensor]], Any]:
        def call(inputs: list[torch.Tensor]) -> Any:
            with torch.no_grad(), _Tilted(lenient):
                return eager_fn(inputs)

        return call

    return [run(True), run(False)]


def at_an_edge(have: torch.Tensor, edges: list[Any], tolerance: torch.Tensor | float) -> torch.Tensor:
    """Where the tilted runs disagree with each other and the artifact's value ``have`` is within
    ``tolerance`` of one of them, element by element."""
    lenient, strict = (e.double() for e in edges)
    hangs = (lenient - strict).abs() > tolerance
    return hangs & (((have - lenient).abs() <= tolerance) | ((have - strict).abs() <= tolerance))
