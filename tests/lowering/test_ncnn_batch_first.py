"""An ncnn engine output whose batch is not dim 0 (a decoder's [queries, B, C]): the engine gives
it batch first, and the executor moves the batch back where the graph has it."""

from __future__ import annotations

import torch
from torch import nn

import fxdeploy
from tests.helpers import require_target


class Transposed(nn.Module):
    """Features as a sequence, sequence first (``nn.MultiheadAttention``'s default layout), plus a
    batch-first output beside it."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.proj = nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.relu(self.conv(x))
        tokens = y.flatten(2).permute(2, 0, 1)  # [H*W, B, C]
        return self.proj(tokens), y.mean((2, 3))


def test_an_output_with_the_batch_in_dim_1_comes_back_in_dim_1(tmp_path) -> None:
    require_target("ncnn")
    model = Transposed().eval()
    deployed = fxdeploy.lower(model, (torch.randn(2, 3, 16, 16),), target="ncnn",
                              dynamic_shapes={"x": {0: ("batch", 1, 4)}})
    outputs = deployed.manifest["info"]["ncnn"]["stages"][0]["outputs"]
    assert [o.get("batch_axis", 0) for o in outputs] == [1, 0], outputs
    loaded = fxdeploy.load(deployed.save(tmp_path / "a"))
    for batch in (1, 3):
        x = torch.randn(batch, 3, 16, 16)
        with torch.no_grad():
            want = model(x)
        for runner in (deployed, loaded):
            got = runner(x)
            assert got[0].shape == (64, batch, 5)
            torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-4)
