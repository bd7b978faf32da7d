"""wrapping_bytes: uint8 and int8 arithmetic computed in int32 and wrapped, as torch wraps it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import fxdeploy
from fxdeploy.passes.wrapping_bytes import check, wrapping_bytes
from tests.helpers import require_target
from tests.passes.graphs import applied

OPS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=3),
    "neg": lambda a, b: -a + b * 0,
    "scalar": lambda a, b: (a + 200) * 7 - 300,
    "rsub": lambda a, b: 100 - a,
}


class Arithmetic(torch.nn.Module):
    def __init__(self, op: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.op = op

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.op(a, b)


def every_pair(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """All 65,536 (a, b) pairs of the dtype's values, as a 256 x 256 grid."""
    values = torch.arange(256, dtype=torch.int32) - (128 if dtype == torch.int8 else 0)
    return values[:, None].expand(256, 256).to(dtype), values[None, :].expand(256, 256).to(dtype)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8])
@pytest.mark.parametrize("op", list(OPS))
def test_every_pair_of_bytes_wraps_as_in_torch(op: str, dtype: torch.dtype) -> None:
    model, (a, b) = Arithmetic(OPS[op]), every_pair(dtype)
    gm = applied(wrapping_bytes, torch.export.export(model, (a, b)).module(check_guards=False))
    got = gm(a, b)
    assert got.dtype == dtype
    assert torch.equal(got, model(a, b))


def test_other_dtypes_stay() -> None:
    model = Arithmetic(lambda a, b: (a + b) * 2)
    for dtype in (torch.int16, torch.int32, torch.float32):
        x = torch.ones(2, 3, dtype=dtype)
        gm = torch.export.export(model, (x, x)).module(check_guards=False)
        adds = [n for n in gm.graph.nodes if n.op == "call_function"]
        assert all(check(n) is not None for n in adds)
        assert "not uint8 or int8" in check(adds[0])


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8])
def test_openvino_wraps_as_eager(dtype: torch.dtype) -> None:
    """Before: OpenVINO's CPU plugin saturated (uint8 200 + 100 gave 255, eager 44), and lower()'s
    check refused the artifact."""
    require_target("openvino")
    model, (a, b) = Arithmetic(OPS["scalar"]), every_pair(dtype)
    deployed = fxdeploy.lower(model, (a, b), target="openvino")
    assert "wrapping_bytes" in deployed.report.fired
    assert torch.equal(deployed(a, b), model(a, b))
