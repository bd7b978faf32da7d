"""Several inputs and outputs reach the engine by name: executors that bind by position (OpenVINO's
set_input_tensor, its output list) must map the manifest's names to the model's own positions."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import fxdeploy
from tests.helpers import require_target

TARGETS = ["onnxruntime", "openvino", "torchscript"]


class TwoInOut(nn.Module):
    """Inputs of different shapes and dtypes; outputs in an order unlike the graph's."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor, ids: torch.Tensor, scale: torch.Tensor) -> dict[str, torch.Tensor]:
        features = self.linear(x) * scale
        return {"count": (ids > 2).sum(1), "features": features, "picked": features.gather(1, ids % 3)}


@pytest.mark.parametrize("target", TARGETS)
def test_inputs_and_outputs_bind_by_name(target: str) -> None:
    require_target(target)
    torch.manual_seed(0)
    model = TwoInOut().eval()
    x, ids, scale = torch.randn(2, 8), torch.tensor([[0, 4, 5], [3, 1, 2]]), torch.rand(2, 1) + 0.5
    deployed = fxdeploy.lower(model, (x, ids, scale), target=target)
    for args in [(x, ids, scale), (x * 2, ids.flip(1), scale * 3)]:
        with torch.no_grad():
            want = model(*args)
        for got in (deployed(*args), deployed(args[0], scale=args[2], ids=args[1])):
            assert list(got) == list(want)
            for key in want:
                assert got[key].dtype == want[key].dtype, key
                assert torch.allclose(got[key].double(), want[key].double(), atol=1e-5), key


class MaskAndScalar(nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return torch.where(mask, x * scale, -x)


@pytest.mark.parametrize("target", TARGETS)
def test_bool_and_zero_dim_inputs(target: str) -> None:
    require_target(target)
    model = MaskAndScalar().eval()
    x, mask, scale = torch.randn(2, 5), torch.rand(2, 5) > 0.5, torch.tensor(3.0)
    deployed = fxdeploy.lower(model, (x, mask, scale), target=target)
    for args in [(x, mask, scale), (x * 2, ~mask, torch.tensor(0.5))]:
        assert torch.equal(deployed(*args), model(*args))
