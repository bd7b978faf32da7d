"""einsum_products: a two-operand einsum that is a (batched) matrix product becomes matmul, each
operand and the product transposed as its letters say, with the same values; other equations stay."""

from __future__ import annotations

import pytest
import torch

from fxdeploy.passes import op_histogram
from fxdeploy.passes.ncnn.einsum_products import einsum_products
from fxdeploy.settings import Settings
from tests.helpers import require_target
from tests.passes.graphs import aten, build


def _operands(equation: str) -> list[torch.Tensor]:
    sizes = {"b": 2, "h": 3, "i": 4, "j": 5, "k": 6, "p": 4, "q": 5, "d": 6}
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(*([2] if t.startswith("...") else []), *(sizes[c] for c in t.removeprefix("...")),
                        generator=generator) for t in equation.split("->")[0].split(",")]


def _applied(equation: str) -> tuple[bool, dict[str, int], torch.Tensor, torch.Tensor]:
    xs = _operands(equation)
    gm = build(lambda g, ps: (g.call_function(aten.einsum.default, (equation, ps)),), 2, xs)
    want = gm(*xs)[0]
    result = einsum_products(gm, Settings())
    result.graph_module.graph.lint()
    result.graph_module.recompile()
    return result.modified, op_histogram(result.graph_module), result.graph_module(*xs)[0], want


@pytest.mark.parametrize("equation", [
    "...pd,...qd->...pq",  # OWL-ViT's patches against its queries
    "bik,bkj->bij", "bki,bkj->bij", "bik,bjk->bij", "bki,bjk->bji", "ik,kj->ij", "bhik,bhjk->bhij", "kj,ik->ij",
])
def test_a_matrix_product_becomes_matmul_with_the_same_values(equation: str) -> None:
    modified, ops, got, want = _applied(equation)
    assert modified and "aten.einsum.default" not in ops and ops["aten.matmul.default"] == 1
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("equation", [
    "bik,bkj->bj",  # sums over i too
    "bij,bij->bij",  # an elementwise product
    "ik,jk->ijk",  # an outer product kept
    "bik,bkj->ij",  # the batch summed
])
def test_other_equations_stay(equation: str) -> None:
    modified, ops, got, want = _applied(equation)
    assert not modified and ops["aten.einsum.default"] == 1
    torch.testing.assert_close(got, want)


class Scored(torch.nn.Module):
    """Patches scored against text queries given as rows, three per image (grouped)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 32, 4, 4)

    def forward(self, x: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        patches = self.conv(x).flatten(2).transpose(1, 2)
        return torch.einsum("...pd,...qd->...pq", patches, (queries * 2).view(x.shape[0], 3, 32))


def test_an_einsum_over_grouped_queries_runs_on_ncnn(tmp_path) -> None:
    """pnnx's Einsum read past its operands here (a segfault), and the queries' first op, in place
    behind a squeeze, wrote into the caller's array (another)."""
    require_target("ncnn")
    import fxdeploy

    model, batch = Scored().eval(), torch.export.Dim("batch", min=1, max=4)
    example = (torch.randn(2, 3, 16, 16), torch.randn(6, 32))
    deployed = fxdeploy.lower(model, example, target="ncnn",
                              dynamic_shapes={"x": {0: batch}, "queries": {0: 3 * batch}})
    loaded = fxdeploy.load(deployed.save(tmp_path / "a"))
    for images in (1, 3):
        x, queries = torch.randn(images, 3, 16, 16), torch.randn(3 * images, 32)
        with torch.no_grad():
            want = model(x, queries)
        for runner in (deployed, loaded):
            torch.testing.assert_close(runner(x, queries), want, rtol=1e-4, atol=1e-4)
