"""value_bounds: bounds on a value's magnitude that hold whatever the inputs (NaN aside)."""

from __future__ import annotations

import torch

from fxdeploy.passes.value_bounds import operand_bound, value_bounds
from tests.passes.graphs import build

aten = torch.ops.aten


def bounded_graph(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> tuple[torch.fx.Node, ...]:
    call = g.call_function
    heat = call(aten.sigmoid.default, (xs[0],))
    pooled = call(aten.max_pool2d.default, (heat, [3, 3], [1, 1], [1, 1]))
    clamped = call(aten.clamp.default, (xs[1], -3.0, 2.0))
    product = call(aten.mul.Tensor, (pooled, clamped))
    total = call(aten.add.Tensor, (product, 0.5))
    padded = call(aten.constant_pad_nd.default, (clamped, [1, 1], -7.0))
    free = call(aten.add.Tensor, (xs[0], heat))  # x0 itself has no bound
    one_sided = call(aten.clamp.default, (xs[1], 0.0))
    return total, padded, free, one_sided


def test_bounds_follow_the_ops_that_keep_values_finite() -> None:
    gm = build(bounded_graph, 2, [torch.zeros(1, 1, 4, 4), torch.zeros(1, 1, 4, 4)])
    bounds = value_bounds(gm)
    output = next(n for n in gm.graph.nodes if n.op == "output")
    total, padded, free, one_sided = output.args[0]
    assert bounds[total] == 1.0 * 3.0 + 0.5
    assert bounds[padded] == 7.0
    assert free not in bounds and one_sided not in bounds
    x = [torch.randn(1, 1, 4, 4) * 1e6, torch.randn(1, 1, 4, 4) * 1e6]
    x[0][0, 0, 0, 0], x[1][0, 0, 1, 1] = float("inf"), -float("inf")
    got_total, got_padded, _, _ = gm(*x)
    assert got_total.abs().max() <= bounds[total] and got_padded.abs().max() <= bounds[padded]


def test_numbers_and_constants() -> None:
    assert operand_bound(-2.5, {}) == 2.5
    assert operand_bound(float("inf"), {}) is None and operand_bound(True, {}) is None

    module = torch.nn.Module()
    module.register_buffer("finite", torch.tensor([1.0, -4.0]))
    module.register_buffer("infinite", torch.tensor([1.0, float("inf")]))
    graph = torch.fx.Graph()
    graph.output((graph.get_attr("finite"), graph.get_attr("infinite")))
    gm = torch.fx.GraphModule(module, graph)
    bounds = value_bounds(gm)
    finite, infinite = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    assert bounds[finite] == 4.0 and infinite not in bounds
