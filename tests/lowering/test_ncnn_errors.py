"""ncnn refusals name the model's value, the op that reads it and the fix, not an internal stage."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import fxdeploy
from tests.helpers import require_target


class DoubleScale(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * 3.0).to(torch.float32)  # THE LINE


def test_a_float64_input_is_refused_naming_the_input_the_op_and_the_fix() -> None:
    """Integers and bools go into the engine as float32 (test_ncnn_integer_inputs.py); a float64
    input has no exact float32 form, so it is refused, by name."""
    require_target("ncnn")
    x = torch.randn(2, 7, dtype=torch.float64)
    with pytest.raises(fxdeploy.LoweringError) as info:
        fxdeploy.lower(DoubleScale().eval(), (x,), target="ncnn", dynamic_shapes={"x": {0: "batch"}})
    message = str(info.value)
    line = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if text.endswith("# THE LINE"))
    assert "'x'" in message and "torch.float64" in message and "mul" in message
    assert f'{__file__}", line {line}' in message
    assert "onnxruntime or openvino" in message and "stage" not in message.split("(")[0]


def test_a_pnnx_run_past_its_timeout_is_stopped_and_said(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hung pnnx (it hung on a cat with an empty input) is stopped at the timeout, with a LoweringError."""
    require_target("ncnn")
    from fxdeploy.lowering import ncnn_convert

    monkeypatch.setattr(ncnn_convert, "PNNX_TIMEOUT_S", 0.01)  # no pnnx run is this quick
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()
    with pytest.raises(fxdeploy.LoweringError, match="pnnx did not finish converting the traced graph in 0.01 s"):
        fxdeploy.lower(model, (torch.rand(1, 3, 16, 16),), target="ncnn")


class StridedWrite(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y[:, ::2] = 0
        return y


class MaskedWrite(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y[y < -1] = -1
        return y


class Copy(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()


@pytest.mark.parametrize(("model", "said"), [
    (StridedWrite(), ["the graph's work runs on the host: aten.slice_scatter.default (pnnx writes a stepped "]),
    (MaskedWrite(), ["Tensor.index_put", "aten.index_put.default (pnnx has no ncnn layer for Tensor.index_put"]),
    (Copy(), []),
])
def test_a_graph_that_leaves_the_engine_nothing_is_refused_naming_the_host_ops(model: nn.Module, said: list) -> None:
    """What the host takes (a strided write; a masked write pnnx cannot convert) left the engine a
    copy of its input, which pnnx writes as its Input layer alone: the refusal said "pnnx produced
    no blob(s) ['in0'] (an unused input, or an output returned twice?)", naming no op."""
    require_target("ncnn")
    with pytest.raises(fxdeploy.LoweringError) as info:
        fxdeploy.lower(model.eval(), (torch.randn(2, 8, 5),), target="ncnn", dynamic_shapes={"x": {0: "batch"}})
    message = str(info.value)
    assert all(text in message for text in said), message
    assert "pnnx wrote no layer that reads the engine's input (in0 to out0, unchanged): the engine stage computes "\
        "nothing from it" in message
    assert message.endswith("; lower to torchscript or onnxruntime") and "no blob" not in message
