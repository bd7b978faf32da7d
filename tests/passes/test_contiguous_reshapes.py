"""contiguous_reshapes: a reshape or view of a permuted tensor, and a reshape at a dynamic size,
read a contiguous clone, so that torch.onnx's traces keep it a valid view (transformers' Swin)."""

from __future__ import annotations

import itertools

import pytest
import torch

import fxdeploy
from fxdeploy.passes import op_histogram
from fxdeploy.passes.contiguous_reshapes import check, contiguous_reshapes
from fxdeploy.settings import Settings
from tests.helpers import require_target
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


def test_a_static_reshape_of_a_permute_reads_a_contiguous_clone() -> None:
    gm = applied(contiguous_reshapes, _graph(dynamic=False))
    reshape = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.reshape.default)
    assert check(reshape) == "its input is a contiguous clone already"
    x = torch.randn(2, 2, 16, 16)
    torch.testing.assert_close(gm(x), Heads()(x), rtol=0, atol=0)


class Flattens(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * 2).reshape(x.shape[0], -1).view(-1)


def test_a_static_reshape_of_an_unpermuted_tensor_stays() -> None:
    gm = torch.export.export(Flattens(), (torch.randn(2, 3, 4),)).module(check_guards=False)
    reshapes = [n for n in gm.graph.nodes if check(n) != "not a reshape or view"]
    assert reshapes and all("not permuted" in check(n) for n in reshapes)
    assert not contiguous_reshapes(gm, Settings()).modified


class PermuteThenView(torch.nn.Module):
    """``x.permute(order)``, made contiguous or not, viewed or reshaped to two dims."""

    def __init__(self, order: tuple[int, ...], op: str) -> None:
        super().__init__()
        self.order, self.op = order, op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = (x + 1).permute(self.order)
        if self.op == "view":
            return y.contiguous().view(y.shape[0], -1)
        return y.reshape(y.shape[0], -1) * 2


@pytest.mark.parametrize("op", ["view", "reshape"])
@pytest.mark.parametrize("order", list(itertools.permutations(range(4)))[1::3])
def test_every_permute_then_view_reads_a_contiguous_clone(order: tuple[int, ...], op: str) -> None:
    model = PermuteThenView(order, op)
    x = torch.randn(2, 3, 4, 5)
    gm = torch.export.export(model, (x,)).module(check_guards=False)
    gm = applied(contiguous_reshapes, gm)
    views = [n for n in gm.graph.nodes if check(n) != "not a reshape or view"]
    assert views and all(check(n) == "its input is a contiguous clone already" for n in views)
    torch.testing.assert_close(gm(x), model(x), rtol=0, atol=0)


class AttentionMerge(torch.nn.Module):
    """transformers' Swin attention: heads split by view + transpose, SDPA with a position bias,
    transposed back and reshaped. SDPA returns the query's layout in one trace and a contiguous one
    in another: the math kernel, which lowering's re-export picks where the mask needs a gradient,
    returns it contiguous, and the flash kernel, which capture picks under no_grad, in the query's
    layout. The dropout makes a pass change the graph, which is then exported afresh."""

    def __init__(self, heads: int, dim: int, tokens: int) -> None:
        super().__init__()
        self.heads, self.dropout = heads, torch.nn.Dropout(0.1)
        self.q, self.k, self.v = (torch.nn.Linear(dim, dim) for _ in range(3))
        self.bias = torch.nn.Parameter(torch.randn(1, heads, tokens, tokens))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = (p(x).view(b, n, self.heads, -1).transpose(1, 2) for p in (self.q, self.k, self.v))
        mask = self.bias * 1.0  # computed from a parameter, as Swin's relative position bias
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.2)
        return self.dropout(out.transpose(1, 2).reshape(b, n, c))


@pytest.mark.parametrize(("batch", "tokens", "heads", "dim"), [(64, 49, 3, 96), (4, 16, 2, 32), (3, 10, 5, 40)])
def test_attention_merge_lowers_at_any_shape(batch: int, tokens: int, heads: int, dim: int) -> None:
    require_target("onnxruntime")
    torch.manual_seed(0)
    model = AttentionMerge(heads, dim, tokens).eval()
    x = torch.randn(batch, tokens, dim)
    deployed = fxdeploy.lower(model, (x,))
    with torch.no_grad():
        want = model(x)
    torch.testing.assert_close(deployed(x), want, rtol=0, atol=1e-5 * float(want.abs().max()))
