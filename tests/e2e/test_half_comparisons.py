"""A model that compares in half itself, lowered at fp32 settings, compares as eager on the ONNX
targets: with the number rounded to half as torch's type promotion rounds it
(``half_comparison_scalars``), and on OpenVINO with each half value rounded as eager rounds it
(``half_rounding``). Before, ``x.half() >= 0.1`` was False at ``x = 0.1`` on both runtimes, and
``x.half() * 3 > y.half()`` was True on OpenVINO where eager is False (ONNX Runtime, too, computes
most f16 ops in f32 and drops the casts); lower()'s check, on a random
example, passed both.
"""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from tests.helpers import require_target

TARGETS = ("onnxruntime", "openvino", "torchscript")
EDGES = torch.tensor([[0.1, 0.09999, 0.10001, 0.0999755859375, 0.2, -0.1, 65519.0, 65520.0, 1e-8, 0.0]])
"""0.1 and what rounds to half(0.1) = 0.0999755859375 or next to it, half's largest and an overflow."""


class AtLeastATenth(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.half() >= 0.1).float() + (x.half() < torch.tensor(0.1)).float() * 2


class TripleAbove(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        in_half = (x.half() * 3 > y.half()) | (x.half() + y.half() == y.half() + 0.0999755859375)
        return in_half.float() + ((x.half() * 3).float() > y - 0.0001).float() * 2


def _lowered(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], target: str) -> fxdeploy.Deployed:
    """Lowered on an ordinary example (the check passed it before the fix too), not on the edges."""
    torch.manual_seed(0)
    return fxdeploy.lower(model, tuple(torch.randn_like(x) for x in inputs), target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_a_half_tensor_against_a_number_compares_with_the_number_in_half(target: str) -> None:
    require_target(target)
    model = AtLeastATenth()
    deployed = _lowered(model, (EDGES,), target)
    assert torch.equal(deployed(EDGES), model(EDGES)), (deployed(EDGES), model(EDGES))


@pytest.mark.parametrize("target", TARGETS)
def test_half_arithmetic_compared_rounds_as_eager(target: str) -> None:
    require_target(target)
    model = TripleAbove()
    x = torch.cat([EDGES, torch.tensor([[0.1, 0.30004, 1.0, 2049.0, 0.33333]])], 1)
    y = torch.cat([EDGES * 3, torch.tensor([[0.3, 0.9, 3.0015, 6148.0, 1.0]])], 1)
    deployed = _lowered(model, (x, y), target)
    assert torch.equal(deployed(x, y), model(x, y)), (deployed(x, y), model(x, y))
