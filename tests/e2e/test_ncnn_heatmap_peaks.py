"""A heatmap's peak per channel, decoded as a keypoint head writes it: the flat index's column and
row (``idx % w``, ``idx // w``) at a dynamic height and width. The argmax stayed in the engine
(pnnx leaves it), the floor division by the run-time width became a pnnx expression the host
fallback could not place, and lower() refused the model; ncnn's own remainder rounds to nearest.
The argmax and the integer arithmetic on it run on the host from the start."""

from __future__ import annotations

import torch
from torch import nn

from fxdeploy.partition.host_nodes import host_nodes, input_free
from fxdeploy.partition.host_reasons import INTEGER_ON_HOST, NO_ARGMAX_LAYER
from tests.helpers import require_target

SHAPES = {"x": {0: ("batch", 1, 4), 2: ("h", 8, 64), 3: ("w", 8, 64)}}


class Peaks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.head = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        heat = self.head(x).sigmoid()
        width = heat.shape[3]
        score, index = heat.flatten(2).max(-1)
        column = (index % width).float()
        row = torch.div(index, width, rounding_mode="floor").float()
        same = index[:, 1:] == index[:, :-1]  # a channel's peak where the previous one's is
        same = torch.cat([torch.zeros_like(same[:, :1]), same], 1).float()
        return torch.stack([column, row, score, same], -1)


def test_the_argmax_and_the_integer_arithmetic_on_it_are_host_nodes() -> None:
    from fxdeploy.capture import capture
    from fxdeploy.passes.base import run_pipeline
    from fxdeploy.passes.pipelines import NCNN
    from fxdeploy.settings import Settings

    captured = capture(Peaks().eval(), (torch.rand(2, 3, 32, 32),), {}, dynamic_shapes=SHAPES, substitutions=(),
                       settings=Settings())
    gm, _ = run_pipeline(captured.graph_module, NCNN[:-1], Settings())  # the passes before the cut
    reasons = {node.target.__name__.split(".")[0]: why for node, why in host_nodes(gm, input_free(gm)).items()
               if node.op == "call_function" and hasattr(node.target, "__name__")}
    assert reasons["argmax"] == NO_ARGMAX_LAYER
    assert reasons["remainder"] == INTEGER_ON_HOST and reasons["div"] == INTEGER_ON_HOST
    assert reasons["eq"] == INTEGER_ON_HOST  # a comparison of the indices, read as numbers by the engine
    assert reasons["cat"] == INTEGER_ON_HOST  # a cat of that bool mask


def test_peaks_at_a_dynamic_size_are_eagers_on_ncnn() -> None:
    require_target("ncnn")
    import fxdeploy

    model = Peaks().eval()
    deployed = fxdeploy.lower(model, (torch.rand(2, 3, 32, 32),), target="ncnn", dynamic_shapes=SHAPES)
    generator = torch.Generator().manual_seed(1)
    for batch, h, w in ((1, 32, 32), (3, 21, 45), (2, 64, 9), (4, 13, 13)):
        x = torch.rand(batch, 3, h, w, generator=generator)
        with torch.no_grad():
            got, want = deployed(x), model(x)
        assert torch.equal(got[..., [0, 1, 3]], want[..., [0, 1, 3]]), (batch, h, w)  # columns, rows: exactly
        torch.testing.assert_close(got[..., 2], want[..., 2], rtol=1e-5, atol=1e-6)
