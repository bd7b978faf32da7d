"""unit_selects: a select or unbind along a static size-1 dim becomes a squeeze."""

from __future__ import annotations

import torch

from fxdeploy.passes import op_histogram
from fxdeploy.passes.ncnn.unit_selects import unit_selects
from fxdeploy.settings import Settings

BATCH = torch.export.Dim("batch", min=2, max=8)


def exported(model: torch.nn.Module, x: torch.Tensor, dynamic: object = None) -> torch.fx.GraphModule:
    program = torch.export.export(model, (x,), dynamic_shapes=dynamic)
    return torch.fx.GraphModule(program.graph_module, program.graph_module.graph)


class Unbound(torch.nn.Module):
    """A list of images from a batch of one, then ``interpolate(image[None])[0]``, as torchvision does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        (image,) = x.unbind(0)
        resized = torch.nn.functional.interpolate(image[None], scale_factor=2.0)[0]
        return resized[:, -1] + x[:, :, :, :1].select(3, -1).sum()


def test_unbind_and_selects_of_one_become_squeezes() -> None:
    model = Unbound()
    gm = exported(model, torch.randn(1, 3, 4, 5))
    result = unit_selects(gm, Settings())
    assert result.modified
    ops = op_histogram(result.graph_module)
    assert "aten.unbind.int" not in ops and ops.get("aten.select.int") == 1, ops  # resized[:, -1] stays
    result.graph_module.recompile()
    x = torch.randn(1, 3, 4, 5)
    torch.testing.assert_close(result.graph_module(x)[0], model(x), rtol=0, atol=0)


class Selects(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[0] + x[:, 1].sum()


def test_selects_of_a_dynamic_or_longer_dim_stay() -> None:
    gm = exported(Selects(), torch.randn(3, 2, 4), dynamic=({0: BATCH},))
    result = unit_selects(gm, Settings())
    assert not result.modified
    assert op_histogram(result.graph_module)["aten.select.int"] == 2
