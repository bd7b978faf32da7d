"""A softmax over a non-last axis lowers, for ONNX Runtime and TensorRT, as its reductions
(``onnx_translations/softmax.py``: ONNX Runtime's kernel transposes the axis, 16x slower on
YOLO's DFL); OpenVINO keeps the Softmax op. Values, non-finite rows and dtypes as eager's."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
import torch

import fxdeploy
from tests.helpers import require_target


class Softmaxes(torch.nn.Module):
    """YOLO's DFL softmax (axis 1 of [b, 16, 4, a]), one over the first axis, one over the last."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        bins = x.view(x.shape[0], 4, 16, -1).transpose(2, 1)
        return bins.softmax(1), torch.softmax(x, 0), torch.nn.functional.softmax(x, dim=-1)


def _x(finite: bool) -> torch.Tensor:
    x = torch.randn(2, 64, 30, generator=torch.Generator().manual_seed(0)) * 8
    if finite:
        return x
    x[0, :, 3] = float("-inf")  # a whole axis-1 column of -inf: NaN in torch
    x[1, 5, 4] = float("inf")  # an inf: NaN along each of its axes
    x[1, 7, 9] = float("nan")
    return x


def _softmax_axes(path: Path) -> list[tuple[int, int]]:
    model = onnx.shape_inference.infer_shapes(onnx.load(str(path)))
    rank = {v.name: len(v.type.tensor_type.shape.dim) for v in (*model.graph.value_info, *model.graph.input)}
    return [(node.attribute[0].i % rank[node.input[0]], rank[node.input[0]])
            for node in model.graph.node if node.op_type == "Softmax"]


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_every_axis_matches_eager(target: str, tmp_path: Path) -> None:
    """Non-finite values on ONNX Runtime (OpenVINO's own Softmax does not give torch's NaN rows:
    lower()'s check refuses it there)."""
    require_target(target)
    x = _x(finite=target == "openvino")
    deployed = fxdeploy.lower(Softmaxes(), (x,), target=target, dynamic_shapes={"x": {0: ("batch", 1, 4)}})
    deployed.save(tmp_path / "art")
    axes = _softmax_axes(tmp_path / "art" / "model.onnx")
    if target == "onnxruntime":
        assert axes == [(2, 3)]  # only the last-axis softmax is the op
    else:
        assert sorted(axes) == [(0, 3), (1, 4), (2, 3)]
    for batch in (1, 2):
        for got, want in zip(deployed(x[:batch]), Softmaxes()(x[:batch]), strict=True):
            assert torch.equal(got.isnan(), want.isnan())
            assert float((got - want).nan_to_num().abs().max()) < 1e-6


def test_half_and_a_dtype_argument_keep_their_types() -> None:
    require_target("onnxruntime")

    class Typed(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x.softmax(0, dtype=torch.float64), torch.softmax(x.half(), 1)

    x = torch.randn(3, 5, 7, generator=torch.Generator().manual_seed(1))
    got, want = fxdeploy.lower(Typed(), (x,), target="onnxruntime")(x), Typed()(x)
    assert [t.dtype for t in got] == [torch.float64, torch.float16]
    assert float((got[0] - want[0]).abs().max()) < 1e-12
    assert float((got[1].float() - want[1].float()).abs().max()) <= torch.finfo(torch.float16).eps


class IntegerScores(torch.nn.Module):
    """Counts turned into (log-)probabilities by the ``dtype`` argument, over the last axis and another."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        counts = (x * 10).int()
        return (torch.softmax(counts, -1, dtype=torch.float32), torch.log_softmax(counts, 1, dtype=torch.float32),
                torch.log_softmax(counts[0, 0], 0, dtype=torch.float64))


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_a_dtype_argument_casts_the_input_first(target: str) -> None:
    """torch.onnx cast the result instead: an integer log-softmax was an invalid ONNX Runtime graph
    ("Type 'tensor(int32)' ... LogSoftmax"), and OpenVINO computed both in integers (off by 0.49)."""
    require_target(target)
    x = torch.randn(2, 5, 7, generator=torch.Generator().manual_seed(2))
    deployed = fxdeploy.lower(IntegerScores(), (x,), target=target)
    other = torch.randn(2, 5, 7, generator=torch.Generator().manual_seed(3))
    for got, want in zip(deployed(other), IntegerScores()(other), strict=True):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
