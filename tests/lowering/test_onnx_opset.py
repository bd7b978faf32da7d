"""The ONNX opset each target writes: 23 on ONNX Runtime and OpenVINO, where ONNX's Attention
carries each scaled_dot_product_attention as one node; 20 on TensorRT; ``Settings.onnx.opset``
overrides both."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
import torch
from torch import nn

import fxdeploy
from fxdeploy.settings import Settings
from fxdeploy.targets.sections import OnnxSettings
from tests.e2e.test_tensorrt_onnx import run_on_ort, tensorrt_flavoured_onnx


class SelfAttention(nn.Module):
    """Two heads over [B, S, 16], with the three mask forms SDPA takes (none, causal, additive
    float, boolean), so each exports to its own Attention node."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.out = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = (t.reshape(b, s, 2, 8).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        # a float mask that is 0 near the diagonal and -3 elsewhere; a boolean one that keeps the
        # first two keys for every query (no row fully masked: torch gives NaN there)
        near = (torch.arange(s)[:, None] - torch.arange(s)[None, :]).abs() <= 1
        float_mask = torch.where(near, 0.0, -3.0).to(x.dtype)
        bool_mask = torch.arange(s)[None, :].expand(s, s) < 2
        plain = nn.functional.scaled_dot_product_attention(q, k, v)
        causal = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        additive = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=float_mask)
        masked = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask)
        merged = (plain + causal + 0.5 * additive - masked).transpose(1, 2).reshape(b, s, 16)
        return self.out(merged)


def _model_and_input() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return SelfAttention().eval(), torch.randn(2, 6, 16)


def _onnx(deployed: fxdeploy.Deployed, tmp_path: Path) -> onnx.ModelProto:
    return onnx.load(str(deployed.save(tmp_path / "artifact") / "model.onnx"))


def _default_opset(model: onnx.ModelProto) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def _op_count(model: onnx.ModelProto, op_type: str) -> int:
    return sum(node.op_type == op_type for node in model.graph.node)


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_default_opset_writes_one_attention_node_per_sdpa(target: str, tmp_path: Path) -> None:
    model, x = _model_and_input()
    deployed = fxdeploy.lower(model, (x,), target=target, dynamic_shapes={"x": {0: "batch", 1: "seq"}})
    written = _onnx(deployed, tmp_path)
    assert _default_opset(written) == 23
    assert deployed.manifest["info"]["onnx_opset"] == 23
    assert _op_count(written, "Attention") == 4
    for batch, seq in ((2, 6), (1, 9)):
        xs = torch.randn(batch, seq, 16)
        with torch.no_grad():
            expected = model(xs)
        torch.testing.assert_close(deployed(xs), expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_an_explicit_opset_is_written_as_given(target: str, tmp_path: Path) -> None:
    model, x = _model_and_input()
    settings = Settings().with_sections(onnx=OnnxSettings(opset=20))
    deployed = fxdeploy.lower(model, (x,), target=target, settings=settings)
    written = _onnx(deployed, tmp_path)
    assert _default_opset(written) == 20
    assert deployed.manifest["info"]["onnx_opset"] == 20
    assert _op_count(written, "Attention") == 0  # spelled out in MatMul, Softmax, ...
    with torch.no_grad():
        expected = model(x)
    torch.testing.assert_close(deployed(x), expected, atol=1e-5, rtol=1e-4)


def test_tensorrt_onnx_stays_at_opset_20(tmp_path: Path) -> None:
    """TensorRT 10 before 10.14 has no Attention parser: its ONNX spells attention out."""
    model, x = _model_and_input()
    path, _ = tensorrt_flavoured_onnx(model, x, tmp_path)
    written = onnx.load(str(path))
    assert _default_opset(written) == 20
    assert _op_count(written, "Attention") == 0
    with torch.no_grad():
        expected = model(x)
    torch.testing.assert_close(run_on_ort(path, x)[0], expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("opset", [1, 17])
def test_an_opset_below_the_translations_is_refused(opset: int) -> None:
    expected = rf"Settings.onnx.opset must be 0 \(the target's\) or at least 18, got {opset}"
    with pytest.raises(ValueError, match=expected):
        OnnxSettings(opset=opset)
