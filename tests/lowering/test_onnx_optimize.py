"""``fxdeploy.lowering.onnx_optimize``: above ``REWRITE_NODE_LIMIT`` nodes the exported graph is
folded and cleaned without onnxscript's rewrite rules, and keeps the model's values."""

from __future__ import annotations

import onnx
import pytest
import torch

import fxdeploy
from fxdeploy.lowering import onnx_optimize
from tests.helpers import require_target


class Mixed(torch.nn.Module):
    """Integer and float arithmetic that exports CastLike nodes, a shared subexpression and constants."""

    def forward(self, x: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scaled = (x * 2 + 1) * n.to(x.dtype)
        shared = scaled.relu() + (x * 2 + 1).sigmoid()
        return shared.sum(-1) / 3, (n * 3 + x.shape[-1]).clamp(max=40)


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_a_graph_above_the_limit_keeps_its_values(target: str, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    require_target(target)
    monkeypatch.setattr(onnx_optimize, "REWRITE_NODE_LIMIT", 0)  # this test only: every graph is "large"
    model = Mixed().eval()  # torch.onnx.export warns of a module in training mode
    x, n = torch.randn(4, 6), torch.arange(4 * 6).reshape(4, 6) % 5
    deployed = fxdeploy.lower(model, (x, n), target=target, dynamic_shapes={"x": {0: ("batch", 1, 8)},
                                                                             "n": {0: ("batch", 1, 8)}})
    deployed.save(tmp_path / "a")
    exported = torch.onnx.export(model, (x, n), dynamo=True, optimize=False, verbose=False, report=False)
    assert [node for node in exported.model.graph if node.op_type == "CastLike"], "the test needs a CastLike"
    graph = onnx.load(str(tmp_path / "a" / "model.onnx")).graph
    assert not [node for node in graph.node if node.op_type == "CastLike"]
    for batch in (1, 3, 8):
        y, m = torch.randn(batch, 6), torch.randint(0, 9, (batch, 6))
        for got, want in zip(deployed(y, m), model(y, m), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)

