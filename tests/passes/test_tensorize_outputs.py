from __future__ import annotations

import torch

from fxdeploy.passes import op_histogram
from fxdeploy.passes.tensorize_outputs import OUTPUT_LEAVES, OUTPUT_NAMES, tensorize_outputs
from fxdeploy.settings import Settings
from tests.passes.graphs import aten, build


def test_constants_leave_the_graph_and_symints_become_tensors() -> None:
    def body(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> tuple[object, ...]:
        relu = g.call_function(aten.relu.default, (xs[0],))
        size = g.call_function(aten.sym_size.int, (xs[0], 0))
        return relu, None, 3, size

    gm = build(body, 1, [torch.randn(4, 2)])
    gm.meta[OUTPUT_NAMES] = ["y", "none", "three", "n"]
    result = tensorize_outputs(gm, Settings())
    gm = result.graph_module
    gm.graph.lint()
    gm.recompile()
    assert result.modified
    assert op_histogram(gm)["aten.scalar_tensor.default"] == 1
    assert gm.meta[OUTPUT_LEAVES] == [
        {"kind": "tensor", "name": "y"},
        {"kind": "constant", "name": "none", "value": None},
        {"kind": "constant", "name": "three", "value": 3},
        {"kind": "scalar", "name": "n", "type": "int"},
    ]
    x = torch.randn(4, 2)
    y, n = gm(x)
    assert torch.equal(y, x.relu()) and n.dtype == torch.int64 and int(n) == 4


def test_all_tensor_outputs_are_not_modified() -> None:
    gm = build(lambda g, xs: (g.call_function(aten.relu.default, (xs[0],)),), 1, [torch.randn(2)])
    result = tensorize_outputs(gm, Settings())
    assert not result.modified
    assert result.graph_module.meta[OUTPUT_LEAVES] == [{"kind": "tensor", "name": "output_0"}]
