"""contiguous_reshapes: a reshape at a dynamic size reads a contiguous clone, so that torch.onnx's
decompositions can spell it as a view (transformers' Swin at a dynamic batch)."""

from __future__ import annotations

import torch

from fxdeploy.passes import op_histogram
from fxdeploy.passes.contiguous_reshapes import check, contiguous_reshapes
from fxdeploy.settings import Settings
from tests.passes.graphs import applied


class Heads(torch.nn.Module):
    """Attention's output merge: [B, heads, N, d] permuted to [B, N, heads, d], reshaped to [B, N, heads * d]."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 2, 1, 3).reshape(x.shape[0], x.shape[2], -1) * 2


def _graph(dynamic: bool) -> torch.fx.GraphModule:
    shapes = ({0: torch.export.Dim("batch", min=1, max=8)},) if dynamic else None
    return torch.export.export(Heads(), (torch.randn(2, 2, 16, 16),), dynamic_shapes=shapes).module(check_guards=False)


def test_a_dynamic_reshape_reads_a_contiguous_clone() -> None:
    gm = _graph(dynamic=True)
    before = op_histogram(gm)
    gm = applied(contiguous_reshapes, gm)
    after = op_histogram(gm)
    assert after.get("aten.clone.default", 0) == before.get("aten.clone.default", 0) + before["aten.reshape.default"]
    reshape = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.reshape.default)
    assert check(reshape) == "its input is a contiguous clone already"
    assert not contiguous_reshapes(gm, Settings()).modified  # idempotent
    x = torch.randn(5, 2, 16, 16)
    torch.testing.assert_close(gm(x), Heads()(x), rtol=0, atol=0)


def test_a_static_reshape_stays() -> None:
    gm = _graph(dynamic=False)
    reshapes = [n for n in gm.graph.nodes if n.target is torch.ops.aten.reshape.default]
    assert reshapes and all("static shape" in check(n) for n in reshapes)
    assert not contiguous_reshapes(gm, Settings()).modified
