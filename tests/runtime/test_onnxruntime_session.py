"""fxdeploy's ONNX Runtime sessions: a kernel that fails at run time raises, and prints nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

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
