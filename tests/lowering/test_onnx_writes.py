"""Functional writes lower to copies on the ONNX targets: ``y[:, 0] = v`` and ``y[..., :4] = b``
as slices and a ``cat`` (``scatters_as_slices``), not a ScatterElements or ScatterND with one index
per element written; the values are eager's."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import fxdeploy

onnx = pytest.importorskip("onnx")

SCATTERS = {"ScatterElements", "ScatterND", "Scatter"}


class Writes(torch.nn.Module):
    """torchvision's image batching (a copy into a zero buffer of one image), a detection head's
    ``x[..., :4] = boxes``, a row of another row and an in-place op on a range."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batched = x.new_full((1, *x.shape[1:]), 0)
        batched[0, :, :, :].copy_(x[0])
        y = batched[0].flatten(1).transpose(0, 1).contiguous()  # [h * w, c]
        y[..., :2] = y[..., :2].sigmoid() * 4
        y[:, 2] = y[:, 3] * 2
        y[:, 3:5] *= 3
        return y


def _scatters(path: Path) -> set[str]:
    return {node.op_type for node in onnx.load(str(path), load_external_data=False).graph.node} & SCATTERS


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_writes_lower_to_no_scatter_with_eager_values(target: str, tmp_path: Path) -> None:
    model = Writes().eval()
    x = torch.randn(1, 6, 5, 4)
    deployed = fxdeploy.lower(model, (x,), target=target)
    assert not _scatters(deployed.save(tmp_path / target) / "model.onnx")
    torch.testing.assert_close(deployed(x), model(x), rtol=1e-6, atol=1e-6)


def test_the_tensorrt_onnx_has_no_scatter_and_eager_values_on_onnx_runtime(tmp_path: Path) -> None:
    """No TensorRT here: the ONNX its engine is built from, on ONNX Runtime."""
    pytest.importorskip("onnxruntime")
    from tests.e2e.test_tensorrt_onnx import run_on_ort, tensorrt_flavoured_onnx

    model = Writes().eval()
    x = torch.randn(1, 6, 5, 4)
    path, _ = tensorrt_flavoured_onnx(model, x, tmp_path)
    assert not _scatters(path)
    torch.testing.assert_close(run_on_ort(path, x)[0], model(x), rtol=1e-6, atol=1e-6)
