"""trace_graph: torch's internal assert on an op its tracer cannot type is said plainly."""

from __future__ import annotations

import pytest
import torch

from fxdeploy.errors import LoweringError
from fxdeploy.lowering.torchscript import trace_graph


class Zero(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.zero.default(x[:, 1:3]) + 1  # functionalization's form of x[:, 1:3].zero_()


def test_an_op_the_tracer_cannot_type_is_named_without_torchs_internal_assert() -> None:
    gm = torch.fx.symbolic_trace(Zero())
    with pytest.raises(LoweringError) as info:
        trace_graph(gm, [torch.randn(2, 4)], target="ncnn")
    message = str(info.value)
    assert "INTERNAL ASSERT" not in message and "please report a bug to PyTorch" not in message
    assert "records an op of this graph as aten::zeros_like" in message
    assert "target='onnxruntime'" in message
