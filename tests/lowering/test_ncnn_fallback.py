"""ncnn_fallback: which nodes of an engine stage stand behind the layers pnnx left unconverted."""

from __future__ import annotations

from pathlib import Path

import torch

from fxdeploy.lowering.ncnn_convert import Layer, UnconvertedLayers, layers
from fxdeploy.lowering.ncnn_fallback import NO_LAYER, layer_kinds, nodes_behind
from tests.passes.graphs import build

aten = torch.ops.aten


def stage(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> torch.fx.Node:
    """``x.eq(y).float() * x + (x // 2)``: what pnnx writes as torch.eq, Tensor.to and an expression."""
    call = g.call_function
    mask = call(aten._to_copy.default, (call(aten.eq.Tensor, (xs[0], xs[1])),), {"dtype": torch.float32})
    return call(aten.add.Tensor, (call(aten.mul.Tensor, (mask, xs[0])), call(aten.floor_divide.default, (xs[0], 2))))


PARAM = """7767517
8 9
Input            in0               0 1 in0
Input            in1               0 1 in1
Split            splitncnn_0       1 3 in0 2 3 4
torch.eq         torch.eq_0        2 1 2 in1 5
pnnx.Expression  pnnx_expr_0       0 1 6
Tensor.to        Tensor.to_1       2 1 5 6 7
pnnx.Expression  pnnx_expr_1       1 1 3 8
BinaryOp         mul_0             2 1 7 4 9 0=2
"""
PNNX_GRAPH = """7767517
3 3
pnnx.Expression  pnnx_expr_0       0 1 6 expr=6
pnnx.Expression  pnnx_expr_1       1 1 3 8 expr=floor_divide(@0,2) #3=(4)f32
"""


def unconverted(tmp_path: Path, kinds: set[str] | None = None) -> UnconvertedLayers:
    param = tmp_path / "model.ncnn.param"
    param.write_text(PARAM)
    graph = layers(param)
    unknown = [layer for layer in graph if "." in layer.kind and (kinds is None or layer.kind in kinds)]
    exc = UnconvertedLayers("ncnn: pnnx left op(s) that ncnn cannot run", unknown, graph)
    exc.module = build(stage, 2, [torch.zeros(4), torch.zeros(4)])
    exc.pnnx_graph = PNNX_GRAPH
    return exc


def test_each_layer_maps_to_the_nodes_of_its_op(tmp_path: Path) -> None:
    """torch.eq -> the eq, Tensor.to -> the _to_copy; the expression that feeds Tensor.to goes with it,
    the one that stands alone names floor_divide in its expr."""
    found, unmapped = nodes_behind(unconverted(tmp_path))
    assert not unmapped
    assert sorted(found) == ["_to_copy_default", "eq_tensor", "floor_divide_default"], found
    assert found["eq_tensor"] == f"{NO_LAYER}torch.eq (node eq_tensor)"  # a hand-built node has no source line
    assert found["_to_copy_default"].startswith(f"{NO_LAYER}Tensor.to (")
    assert layer_kinds(found) == ["Tensor.to", "pnnx.Expression", "torch.eq"]


def test_a_layer_with_no_node_behind_it_is_named(tmp_path: Path) -> None:
    exc = unconverted(tmp_path, {"torch.eq"})
    exc.layers.append(Layer("torch.cumprod", "torch.cumprod_3", ("2",), ("10",)))
    found, unmapped = nodes_behind(exc)
    assert sorted(found) == ["eq_tensor"] and unmapped == ["torch.cumprod (layer torch.cumprod_3)"]


def test_an_expression_of_arithmetic_alone_names_no_node(tmp_path: Path) -> None:
    exc = unconverted(tmp_path, {"pnnx.Expression"})
    exc.pnnx_graph = PNNX_GRAPH.replace("floor_divide(@0,2)", "[1,size(@0,1)]")
    found, unmapped = nodes_behind(exc)
    assert not found and unmapped == ["pnnx.Expression (layer pnnx_expr_0)", "pnnx.Expression (layer pnnx_expr_1)"]


class PairProducts(torch.nn.Module):
    """Products of every pair of pixels of a crop (an Einsum to 5 dims, which ncnn will not load as
    pnnx writes it), then a linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(256, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        crop = x[..., :4, :4]
        return self.linear(torch.einsum("bchw,bcHW->bhwHW", crop, crop).flatten(1)).relu()


def test_a_layer_ncnn_cannot_load_runs_on_the_host(capfd) -> None:
    """Before: "loading model.ncnn.param failed", and ncnn's own line on the console. Now the load
    fails in the trial's child; the layer it names goes to the host, and the console stays quiet."""
    import fxdeploy
    from tests.helpers import require_target

    require_target("ncnn")
    model = PairProducts().eval()
    deployed = fxdeploy.lower(model, (torch.rand(2, 6, 8, 10),), target="ncnn",
                              dynamic_shapes={"x": {0: ("b", 1, 4), 2: ("h", 6, 16), 3: ("w", 6, 16)}})
    kinds = [stage["kind"] for stage in deployed.manifest["info"]["ncnn"]["stages"]]
    assert "host" in kinds and "engine" in kinds, kinds
    for shape in [(1, 6, 6, 6), (3, 6, 11, 7)]:
        x = torch.rand(shape)
        torch.testing.assert_close(deployed(x), model(x), atol=1e-5, rtol=0)
    assert "load_param" not in capfd.readouterr().err
