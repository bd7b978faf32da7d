"""composite_ops: a postprocess's std, var_mean, aminmax, any/all/count_nonzero, diff, rot90, tile,
repeat_interleave, outer, addcmul, addcdiv and element-wise losses are the ops that define them. pnnx left each an
``aten::`` layer ncnn cannot create, so each ran on the host between two engines (and a graph of
them alone was refused)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fxdeploy.passes.ncnn.comparisons_as_arithmetic import comparisons_as_arithmetic
from fxdeploy.passes.ncnn.composite_ops import _SPELLINGS, check, composite_ops
from fxdeploy.passes.remove_asserts import remove_asserts
from fxdeploy.settings import Settings
from tests.passes.graphs import applied
from tests.passes.ncnn.on_engine import assert_eagers_on_ncnn

pytestmark = pytest.mark.filterwarnings("ignore:Using a target size:UserWarning")  # the broadcast is meant
SHAPES = {"x": {0: ("batch", 1, 4), 2: ("h", 8, 64), 3: ("w", 8, 64)}}
SIZES = ((1, 8, 8), (3, 13, 9), (2, 64, 37), (1, 11, 64))


class Statistics(torch.nn.Module):
    """Per-image statistics and rearrangements a hand-written postprocess reaches for."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        var, mean = torch.var_mean(x, (2, 3), keepdim=True)
        standardized = (x - mean) / (var + 1e-5).sqrt()
        low, high = x.aminmax(dim=1)
        spread = x.std(-1) + x.var(2, correction=0).mean(-1, keepdim=True)
        hits = (x > 0.5).any(-1).float() + (x > -1.0).all(-1).float() + torch.count_nonzero(x > 0.7, dim=-1).float()
        steps = torch.diff(x, dim=-1), torch.diff(x, n=2, dim=2)
        turned = torch.rot90(x, 1, (2, 3)) * 2.0 + torch.rot90(x, 2, (2, 3)).sum(-1, keepdim=True).transpose(2, 3)
        copies = x.tile((1, 1, 2, 1)) + 1.0
        spread_rows = x[:, 0].repeat_interleave(2, dim=1) * 3.0
        mixed = torch.addcmul(x, x, x, value=0.5) + torch.addcdiv(x, x, x.abs() + 1.0)
        mirrored = x.flip(1)
        costs = (F.l1_loss(x, mirrored, reduction="none"), F.mse_loss(x, mirrored[:, :1], reduction="none"),
                 F.smooth_l1_loss(x, mirrored, reduction="none", beta=0.5), F.huber_loss(x, mirrored, reduction="none"))
        return standardized, low * high, spread, hits, *steps, turned, copies, spread_rows, mixed, *costs


def _graph(model: torch.nn.Module) -> torch.fx.GraphModule:
    dims = {d: torch.export.Dim(name, min=low, max=high) for d, (name, low, high) in SHAPES["x"].items()}
    program = torch.export.export(model, (torch.randn(2, 3, 16, 16),), dynamic_shapes={"x": dims})
    return remove_asserts(program.module(check_guards=False), Settings()).graph_module


def _composites(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target in _SPELLINGS]


def test_each_composite_op_is_spelled_and_the_values_are_eagers() -> None:
    gm = _graph(Statistics())
    found = {n.target.name() for n in _composites(gm)}
    assert {"aten::var_mean", "aten::aminmax", "aten::std", "aten::var", "aten::any", "aten::all",
            "aten::count_nonzero", "aten::diff", "aten::rot90", "aten::tile", "aten::repeat_interleave",
            "aten::addcmul", "aten::addcdiv", "aten::broadcast_tensors", "aten::l1_loss", "aten::mse_loss",
            "aten::smooth_l1_loss", "aten::huber_loss"} <= {name.split(".")[0] for name in found}
    assert [check(n) for n in _composites(gm)] == [None] * len(_composites(gm))
    gm = applied(composite_ops, gm)
    assert not _composites(gm)
    gm = applied(comparisons_as_arithmetic, gm)  # any, all, count_nonzero of the comparisons, as floats
    values = [n.meta.get("val") for n in gm.graph.nodes]
    bools = [v for v in values if isinstance(v, torch.Tensor) and v.dtype == torch.bool]
    assert not bools, bools
    for batch, h, w in SIZES:
        x = torch.randn(batch, 3, h, w)
        for got, want in zip(gm(x), Statistics()(x), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_an_outer_product_and_a_whole_reduction_are_spelled() -> None:
    class Whole(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return (torch.outer(x[0], x[1]), x.std(), (x > 0).any(), x.repeat_interleave(3),
                    F.mse_loss(x, x.flip(0)), F.l1_loss(x, x[:1], reduction="sum"), F.huber_loss(x, x * 3, delta=0.5))

    x = torch.randn(2, 5)
    gm = applied(composite_ops, torch.export.export(Whole(), (x,)).module())
    assert not _composites(gm)
    for got, want in zip(gm(x), Whole()(x), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_other_dtypes_and_a_4d_interleave_of_a_dynamic_size_stay() -> None:
    class Others(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return torch.diff(x.argmax(1), dim=-1), x.double().std(-1), x.repeat_interleave(2, dim=3)

    reasons = {check(n) for n in _composites(_graph(Others()))}
    assert reasons == {
        "an input's dtype is not one of ['torch.float32']",
        "its copies would be a per-image 4-D blob of a dynamic size, whose Tile ncnn shapes otherwise",
    }


def test_statistics_at_a_dynamic_size_run_on_ncnns_engine_alone() -> None:
    assert_eagers_on_ncnn(Statistics(), torch.randn(2, 3, 16, 16), SHAPES, SIZES, rtol=1e-4, atol=1e-4)
