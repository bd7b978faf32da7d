"""integer_powers: ``x ** 2`` and ``x ** 3`` of a float32 tensor become products with PyTorch's values
bit for bit; other powers stay. On ncnn the engine keeps them (its pow gives other values for a
negative base, which the bisection would send to the host)."""

from __future__ import annotations

import pytest
import torch

from fxdeploy.passes import op_histogram
from fxdeploy.passes.ncnn.integer_powers import integer_powers
from fxdeploy.settings import Settings
from tests.helpers import require_target
from tests.passes.graphs import aten, build

X = torch.randn(4, 7, generator=torch.Generator().manual_seed(0)) * 30  # negative bases, large cubes


def _applied(exponent: object, x: torch.Tensor) -> tuple[bool, dict[str, int], torch.Tensor, torch.Tensor]:
    gm = build(lambda g, xs: (g.call_function(aten.pow.Tensor_Scalar, (xs[0], exponent)),), 1, [x])
    want = gm(x)[0]
    result = integer_powers(gm, Settings())
    result.graph_module.graph.lint()
    result.graph_module.recompile()
    return result.modified, op_histogram(result.graph_module), result.graph_module(x)[0], want


@pytest.mark.parametrize("exponent", [2, 3, 2.0, 3.0])
def test_a_square_or_cube_becomes_products_bit_for_bit(exponent) -> None:
    modified, ops, got, want = _applied(exponent, X)
    assert modified and "aten.pow.Tensor_Scalar" not in ops
    assert ops["aten.mul.Tensor"] == int(exponent) - 1
    assert torch.equal(got, want)


@pytest.mark.parametrize(("exponent", "x"), [(4, X), (0.5, X.abs()), (-1, X), (True, X), (3, X.double())],
                         ids=["fourth", "root", "inverse", "bool", "float64"])
def test_other_powers_stay(exponent, x) -> None:
    modified, ops, got, want = _applied(exponent, x)
    assert not modified and ops["aten.pow.Tensor_Scalar"] == 1
    torch.testing.assert_close(got, want)


class TanhGelu(torch.nn.Module):
    """GPT-2's activation (``x ** 3`` inside), beside a scaled copy of the same input (an in-place
    ncnn layer after the Split of the input blob)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x * 3, approximate="tanh") + 0.5 * x.pow(3)


def test_a_cube_stays_in_the_ncnn_engine_with_eager_values() -> None:
    require_target("ncnn")
    import fxdeploy

    model, batch = TanhGelu(), torch.export.Dim("batch", min=1, max=4)
    deployed = fxdeploy.lower(model, (torch.randn(2, 5, 8),), target="ncnn", dynamic_shapes={"x": {0: batch}})
    assert "unconverted_on_host" not in deployed.manifest["info"], deployed.manifest["info"]["unconverted_on_host"]
    for rows in (1, 3):
        x = torch.randn(rows, 5, 8) * 3
        torch.testing.assert_close(deployed(x), model(x), rtol=1e-4, atol=1e-4)
