"""empty_cat_inputs: a cat's inputs of a static size 0 go (pnnx hangs on them), where that changes nothing."""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from fxdeploy.passes import op_histogram
from fxdeploy.passes.ncnn.empty_cat_inputs import check, empty_cat_inputs
from fxdeploy.settings import Settings
from tests.helpers import require_target


def exported(model: torch.nn.Module, x: torch.Tensor) -> torch.fx.GraphModule:
    program = torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=8)},))
    return torch.fx.GraphModule(program.graph_module, program.graph_module.graph)


class EmptySlice(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x[:, :0], x], 1) * 2


class Accumulates(torch.nn.Module):
    """``out = zeros(B, 0, W); out = cat([out, row])`` in a loop, as postprocessing code collects rows."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(x.shape[0], 0, x.shape[3])
        for i in range(x.shape[2]):
            out = torch.cat([out, x[:, 0, i : i + 1]], 1)
        return out.relu()


class Promotes(torch.nn.Module):
    """An empty float input makes an integer cat a float one: it must stay."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.zeros(0), x.flatten().long()]) + 1


@pytest.mark.parametrize("model", [EmptySlice(), Accumulates()], ids=["slice", "accumulate"])
def test_empty_inputs_go_and_values_stay(model: torch.nn.Module) -> None:
    gm = exported(model, torch.randn(2, 3, 6, 8))
    before = sum(len(n.args[0]) for n in gm.graph.nodes if n.op == "call_function" and check(n) is None)
    result = empty_cat_inputs(gm, Settings())
    assert result.modified and before > 0
    assert all(check(n) in ("not aten.cat", "no input is empty") for n in result.graph_module.graph.nodes)
    result.graph_module.recompile()
    x = torch.randn(3, 3, 6, 8)
    torch.testing.assert_close(result.graph_module(x)[0], model(x), rtol=0, atol=0)


def test_an_empty_input_that_promotes_the_dtype_stays() -> None:
    gm = exported(Promotes(), torch.randn(2, 3))
    cats = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is torch.ops.aten.cat.default]
    assert [check(n) for n in cats] == ["an empty input promotes the dtype"]
    assert not empty_cat_inputs(gm, Settings()).modified
    assert op_histogram(gm)["aten.cat.default"] == 1


@pytest.mark.parametrize("model", [EmptySlice(), Accumulates()], ids=["slice", "accumulate"])
def test_ncnn_lowers_a_cat_with_an_empty_input(model: torch.nn.Module) -> None:
    require_target("ncnn")
    deployed = fxdeploy.lower(model, (torch.randn(2, 3, 6, 8),), target="ncnn",
                              dynamic_shapes={"x": {0: ("batch", 1, 4)}})
    x = torch.randn(3, 3, 6, 8)
    torch.testing.assert_close(deployed(x), model(x), rtol=1e-4, atol=1e-5)
