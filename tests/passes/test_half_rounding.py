"""half_rounding: the half values a comparison reads are rounded in float32 ops (ONNX Runtime and
OpenVINO compute f16 in f32 and drop the rounding); in torch's semantics the rewrite is the identity."""

from __future__ import annotations

import torch

from fxdeploy.passes import op_histogram
from fxdeploy.passes.half_rounding import check, half_rounding, round_to_half
from fxdeploy.settings import Settings
from tests.passes.graphs import applied


def _graph(fn: object, *inputs: torch.Tensor) -> torch.fx.GraphModule:
    class Model(torch.nn.Module):
        def forward(self, *args: torch.Tensor) -> torch.Tensor:
            return fn(*args)

    return torch.export.export(Model(), inputs).run_decompositions({}).module(check_guards=False)


def _edges() -> torch.Tensor:
    """Every finite half, its float32 neighbours and the midpoints between halves (ties), specials,
    and a million random float32 bit patterns."""
    halves = torch.arange(-2**15, 2**15, dtype=torch.int32).to(torch.int16).view(torch.float16).float()
    halves = halves[torch.isfinite(halves)].sort().values
    mids = ((halves.double()[:-1] + halves.double()[1:]) / 2).float()
    up, down = torch.tensor(float("inf")), torch.tensor(float("-inf"))
    bits = torch.randint(-2**31, 2**31 - 1, (1_000_000,), generator=torch.Generator().manual_seed(0))
    special = torch.tensor([65519.996, 65520.0, 3.4e38, float("inf"), -float("inf"), float("nan"), -0.0, 1e-45, 2**-25])
    return torch.cat([halves, torch.nextafter(halves, up), torch.nextafter(halves, down), mids,
                      torch.nextafter(mids, up), torch.nextafter(mids, down), bits.to(torch.int32).view(torch.float32),
                      special])


def test_round_to_half_is_the_conversion_bit_for_bit() -> None:
    f = _edges()
    want, got = f.half().float(), round_to_half(f)
    same = (want.view(torch.int32) == got.view(torch.int32)) | (want.isnan() & got.isnan())
    assert same.all(), (f[~same][:8], got[~same][:8], want[~same][:8])


def test_the_half_values_a_comparison_reads_are_rounded() -> None:
    x, y = torch.tensor([0.1, 0.2, -3.0]), torch.tensor([0.3, 0.6, -9.0])
    gm = _graph(lambda x, y: x.half() * 3 > y.half(), x, y)
    gm = applied(half_rounding, gm)
    assert op_histogram(gm)["aten.round.default"] == 3  # x.half(), the product and y.half()
    assert torch.equal(gm(x, y), x.half() * 3 > y.half())


def test_moves_are_not_rounded_and_other_precisions_are_left() -> None:
    x = torch.tensor([[0.1, 0.2], [0.3, 0.4]])
    gm = _graph(lambda x: x.half().t().reshape(4) > 0.25, x)
    views = [n for n in gm.graph.nodes if n.op == "call_function" and str(n.target).split(".")[1] in ("t", "clone",
                                                                                                     "_unsafe_view")]
    assert len(views) == 3, gm.graph
    assert all("moves half values" in check(n) for n in views), [check(n) for n in views]
    assert not half_rounding(gm, Settings(precision="fp16")).modified
    gm = applied(half_rounding, gm)
    assert op_histogram(gm)["aten.round.default"] == 1


def test_half_values_compared_after_a_conversion_are_rounded() -> None:
    x = torch.tensor([0.1, 0.2, 0.0999755859375])
    gm = _graph(lambda x: (x.half() * 3).float() > 0.29990234375, x)
    gm = applied(half_rounding, gm)
    assert op_histogram(gm)["aten.round.default"] == 2  # x.half() and the product
    assert torch.equal(gm(x), (x.half() * 3).float() > 0.29990234375)


def test_a_graph_without_comparisons_is_left() -> None:
    gm = _graph(lambda x: (x.half() * 3).float(), torch.tensor([0.1, 0.2]))
    assert not half_rounding(gm, Settings()).modified
