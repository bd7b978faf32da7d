"""functional_spellings: functionalization's internal ops (_unsafe_view, clamp_min, clamp_max) become
the public ops pnnx converts, with the same values."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fxdeploy.capture.functional import functionalize
from fxdeploy.passes import op_histogram
from fxdeploy.passes.ncnn.functional_spellings import functional_spellings
from fxdeploy.settings import Settings
from tests.passes.graphs import build

INTERNAL = {"aten._unsafe_view.default", "aten.clamp_min.default", "aten.clamp_max.default"}


class NormalizeThenWrite(torch.nn.Module):
    """SSD's L2Norm (F.normalize), a reshape, and a write that makes the graph functionalized (which
    spells the first two with clamp_min and _unsafe_view)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.normalize(x, dim=1).transpose(1, 2).reshape(x.shape[0], -1).clamp(max=0.5)
        y[:, 0] = 1.0
        return y


def test_internal_ops_become_public_ones_with_the_same_values() -> None:
    model = NormalizeThenWrite()
    x = torch.randn(2, 3, 5)
    gm = functionalize(torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("b")},))).module()
    assert {"aten._unsafe_view.default", "aten.clamp_min.default"} <= set(op_histogram(gm))
    result = functional_spellings(gm, Settings())
    assert result.modified
    result.graph_module.graph.lint()
    result.graph_module.recompile()
    assert not INTERNAL & set(op_histogram(result.graph_module))
    fresh = torch.randn(4, 3, 5)
    fresh[0, :, 0] = 0.0  # a zero vector: the clamp_min's eps decides
    torch.testing.assert_close(result.graph_module(fresh), model(fresh), rtol=0, atol=0)


def test_a_graph_without_them_is_unchanged() -> None:
    gm = torch.export.export(torch.nn.ReLU(), (torch.randn(2, 3),)).module()
    assert not functional_spellings(gm, Settings()).modified


def test_every_clamp_spelling_keeps_its_values() -> None:
    aten = torch.ops.aten

    def body(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> tuple[torch.fx.Node, ...]:
        return (g.call_function(aten.clamp_max.default, (xs[0], 0.25)),
                g.call_function(aten.clamp_min.Tensor, (xs[0], xs[1])),
                g.call_function(aten.clamp_max.Tensor, (xs[0], xs[1])))

    x = [torch.tensor([-1.0, 0.0, 0.3, float("inf"), float("nan")]), torch.tensor([0.5, -0.0, 0.3, 2.0, 0.0])]
    gm = build(body, 2, x)
    want = gm(*x)
    result = functional_spellings(gm, Settings())
    assert result.modified
    result.graph_module.recompile()
    assert set(op_histogram(result.graph_module)) == {"aten.clamp.default", "aten.clamp.Tensor"}
    for got, expected in zip(result.graph_module(*x), want, strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)


NORM = torch.ops.aten.linalg_norm.default
X = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize(("args", "vector"), [
    ((None, [-1], True), True),  # CLIP's torch.linalg.norm(x, dim=-1, keepdim=True)
    ((2, [-1], True), True),
    ((2, -1, False), True),
    ((None, [1, 2], False), True),  # ord None over two dims: the Frobenius norm, a vector 2-norm
    ((None,), True),  # every element
    ((2, [1, 2], False), False),  # ord 2 over two dims: the spectral norm stays
    ((1, [-1], False), False),
])
def test_a_vector_norm_becomes_linalg_vector_norm_with_the_same_values(args, vector) -> None:
    gm = build(lambda g, xs: (g.call_function(NORM, (xs[0], *args)),), 1, [X])
    want = gm(X)[0]
    result = functional_spellings(gm, Settings())
    result.graph_module.recompile()
    assert result.modified == vector
    assert ("aten.linalg_vector_norm.default" in op_histogram(result.graph_module)) == vector
    torch.testing.assert_close(result.graph_module(X)[0], want, rtol=1e-6, atol=1e-6)


class Transposed(torch.nn.Module):
    """``x.T``, which torch.export keeps as aten.numpy_T (pnnx has no converter: ncnn refused)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x[0].T * 2).T.sum(0) + x.mean(0).T.sum(1)


def test_numpy_t_becomes_a_permute_with_the_same_values() -> None:
    model, x = Transposed(), torch.randn(2, 3, 4)
    gm = torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("b")},)).module()
    assert "aten.numpy_T.default" in set(op_histogram(gm))
    result = functional_spellings(gm, Settings())
    result.graph_module.graph.lint()
    result.graph_module.recompile()
    assert "aten.numpy_T.default" not in set(op_histogram(result.graph_module))
    fresh = torch.randn(5, 3, 4)
    torch.testing.assert_close(result.graph_module(fresh), model(fresh), rtol=0, atol=0)
