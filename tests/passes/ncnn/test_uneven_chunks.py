"""uneven_chunks: a chunk into pieces of unequal sizes (64 rows in 3: 22, 22, 20) is the split it is;
pnnx wrote ncnn's equal Slice, which cut 21, 21, 22, and lower() refused the graph."""

from __future__ import annotations

import torch

from fxdeploy.passes.ncnn.uneven_chunks import check, uneven_chunks
from tests.helpers import require_target
from tests.passes.graphs import applied

aten = torch.ops.aten


class Thirds(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a, b, c = torch.chunk(x, 3, dim=2)
        return a * 2.0, b + 1.0, c - 1.0


class Halves(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.chunk(x, 2, dim=-1)


def _chunks(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is aten.chunk.default]


def test_an_uneven_chunk_is_the_split_of_its_pieces_sizes() -> None:
    x = torch.randn(1, 3, 64, 8)
    gm = torch.export.export(Thirds(), (x,)).module()
    assert [check(n) for n in _chunks(gm)] == [None]
    gm = applied(uneven_chunks, gm)
    assert not _chunks(gm)
    splits = [n for n in gm.graph.nodes if n.target is aten.split_with_sizes.default]
    assert [list(n.args[1:]) for n in splits] == [[[22, 22, 20], 2]]
    for got, want in zip(gm(x), Thirds()(x), strict=True):
        assert torch.equal(got, want)


def test_an_even_chunk_stays() -> None:
    gm = torch.export.export(Halves(), (torch.randn(1, 3, 4, 8),)).module()
    assert [check(n) for n in _chunks(gm)] == ["its pieces are of one size, which ncnn cuts as PyTorch does"]


def test_an_uneven_chunk_is_eagers_on_ncnn() -> None:
    require_target("ncnn")
    import fxdeploy

    model = Thirds().eval()
    deployed = fxdeploy.lower(model, (torch.randn(2, 3, 64, 40),), target="ncnn",
                              dynamic_shapes={"x": {0: "batch", 3: ("w", 32, 128)}})
    for batch, w in ((1, 40), (3, 57), (2, 128)):
        x = torch.randn(batch, 3, 64, w)
        with torch.no_grad():
            for got, want in zip(deployed(x), model(x), strict=True):
                assert got.shape == want.shape and float((got - want).abs().max()) <= 1e-5, (batch, w)
