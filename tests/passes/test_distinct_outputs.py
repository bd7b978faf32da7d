"""distinct_outputs: an input returned as it is, or one value returned twice, lowers on the ONNX
targets (the exporter named each output by renaming its value: an internal error at the first
call, before the pass), and every output equals eager's."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import fxdeploy
from fxdeploy.passes.distinct_outputs import check
from tests.helpers import require_target


class Returned(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class Twice(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        v = x[:, :2] * 3
        return v, v


class BesideAView(nn.Module):
    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        head = x[:, :2]
        return {"input": x, "head": head, "again": head, "scaled": x * 2}


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
@pytest.mark.parametrize("model", [Returned(), Twice(), BesideAView()], ids=["input", "twice", "mixed"])
def test_outputs_that_share_a_value_lower_and_match_eager(model: nn.Module, target: str) -> None:
    require_target(target)
    deployed = fxdeploy.lower(model, (torch.randn(2, 4),), target=target, dynamic_shapes={"x": {0: ("batch", 1, 4)}})
    for batch in (1, 3):
        x = torch.randn(batch, 4)
        want, got = model(x), deployed(x)
        assert type(got) is type(want)
        for w, g in zip(*(list(o.values()) if isinstance(o, dict) else [o] if torch.is_tensor(o) else list(o)
                          for o in (want, got)), strict=True):
            assert torch.equal(w, g)


def test_check_says_which_outputs_need_a_copy() -> None:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    y = graph.call_function(torch.ops.aten.mul.Tensor, (x, 2))
    for node in (x, y):
        node.meta["val"] = torch.empty(2)
    assert check(x, set()) is None and check(y, {y}) is None
    assert check(y, set()) == "a value of its own, returned once"
    assert check(3, set()) == "not a tensor"
