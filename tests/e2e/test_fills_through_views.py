"""A write of one value through a view lowers to ncnn: torch.jit.trace, which pnnx reads, asserted
on its functional form (``aten.zero``, ``aten.fill``) until functional_fills spelt it as a factory op."""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from tests.helpers import require_target

CASES = {
    "zero_through_a_slice": "y = x.clone(); y[:, 1:3].zero_(); return y",
    "zero_through_a_view": "y = x.clone(); v = y.view(x.shape[0], 2, 3); v[:, 0].zero_(); return y + 1",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_writes_through_views_lower_to_ncnn(name: str) -> None:
    require_target("ncnn")
    namespace: dict = {"torch": torch}
    body = CASES[name].replace("; ", "\n        ")
    exec(f"class M(torch.nn.Module):\n    def forward(self, x):\n        {body}\n", namespace)  # noqa: S102
    model = namespace["M"]().eval()
    deployed = fxdeploy.lower(model, (torch.randn(4, 6),), target="ncnn", dynamic_shapes={"x": {0: "batch"}})
    for batch in (1, 3):
        x = torch.randn(batch, 6)
        assert (deployed(x) - model(x)).abs().max().item() < 1e-5
