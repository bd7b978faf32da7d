"""fxdeploy's ONNX Runtime sessions: a kernel that fails at run time raises, and prints nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import fxdeploy
from fxdeploy.errors import LoweringError

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


def _reshape_model(path: Path) -> Path:
    """``Reshape(x, shape)``: a shape that does not fit x fails inside the kernel, not at load."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])], "reshape",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_a_failing_kernel_raises_and_keeps_the_console_quiet(tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    from fxdeploy.runtime.onnxruntime import _session

    session = _session(_reshape_model(tmp_path / "m.onnx"), threads=1)
    x = np.arange(6, dtype=np.float32)
    assert session.run(None, {"x": x, "shape": np.array([2, 3])})[0].shape == (2, 3)
    with pytest.raises(Exception, match="Reshape"):
        session.run(None, {"x": x, "shape": np.array([4, 4])})
    out, err = capfd.readouterr()
    assert out == "" and err == ""


class DoubleAtan(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.double().atan().float()


def test_a_kernel_the_cpu_provider_lacks_is_named_with_what_to_do() -> None:
    """ONNX Runtime has no float64 Atan: its session refuses the graph when it loads; said, not relayed raw."""
    with pytest.raises(LoweringError) as info:
        fxdeploy.lower(DoubleAtan().eval(), (torch.randn(3, 4),), target="onnxruntime")
    message = str(info.value)
    assert "its CPU provider has no kernel for Atan(" in message and "node 'node_atan'" in message, message
    assert "use target 'openvino' or 'torchscript'" in message and "did not expect" not in message, message
