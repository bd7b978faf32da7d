"""ONNX translations of fxdeploy::nms and fxdeploy::batched_nms: data-dependent outputs on ORT."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import onnx
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import fxdeploy.ops as ops
from fxdeploy.lowering.onnx_translations import translation_table
from tests.lowering.onnx_helpers import op_histogram, ort_session


class _Nms(torch.nn.Module):
    def forward(self, boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor) -> torch.Tensor:
        return ops.nms(boxes, scores, 0.5)


class _BatchedNms(torch.nn.Module):
    def forward(self, boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor) -> torch.Tensor:
        return ops.batched_nms(boxes, scores, idxs, 0.5)


@functools.cache
def _model(batched: bool) -> onnx.ModelProto:
    module = _BatchedNms() if batched else _Nms()
    boxes = torch.tensor([[0, 0, 1, 1], [0, 0, 1, 1.1], [5, 5, 6, 6], [1, 1, 0, 0]], dtype=torch.float32)
    args = (boxes, torch.tensor([0.9, 0.8, 0.7, 0.6]), torch.tensor([0, 1, 0, 1]))
    num = torch.export.Dim("num_boxes", min=2, max=10_000)
    ep = torch.export.export(module, args, dynamic_shapes=({0: num}, {0: num}, {0: num}), strict=True)
    program = torch.onnx.export(
        ep, args, dynamo=True, custom_translation_table=translation_table(), optimize=True, verbose=False
    )
    model = program.model_proto
    model.ir_version = 10
    return model


def _run(batched: bool, boxes: np.ndarray, scores: np.ndarray, idxs: np.ndarray) -> list[int]:
    session = _session(batched)
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, (boxes, scores, idxs), strict=True)))[0].tolist()


@functools.cache
def _session(batched: bool) -> Any:
    return ort_session(_model(batched))


@pytest.mark.parametrize("batched", [False, True])
def test_graph_is_valid_with_one_nonmaxsuppression(batched: bool) -> None:
    model = _model(batched)
    onnx.checker.check_model(model, full_check=True)
    assert op_histogram(model)["NonMaxSuppression"] == 1
    (output,) = model.graph.output
    assert output.type.tensor_type.elem_type == onnx.TensorProto.INT64
    assert [bool(d.dim_param) for d in output.type.tensor_type.shape.dim] == [True]  # data-dependent


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    st.integers(0, 12).flatmap(
        lambda n: st.tuples(
            arrays(np.float32, (n, 4), elements=st.sampled_from([0.0, 1.0, 2.0, 2.5, 3.0])),
            arrays(np.float32, (n,), elements=st.sampled_from([0.1, 0.2, 0.5, 0.7, 0.9])),
            arrays(np.int64, (n,), elements=st.integers(-2, 3)),
        )
    )
)
@example(  # a flipped twin: torchvision keeps both, a normalizing NMS would not
    (
        np.array([[0, 0, 1, 1], [1, 1, 0, 0], [0, 1, 1, 0]], np.float32),
        np.array([0.9, 0.8, 0.7], np.float32),
        np.array([0, 0, 0]),
    )
)
def test_onnxruntime_matches_reference(data: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    """Grid boxes (flipped, degenerate, identical) and tied scores, as the reference defines them."""
    boxes, scores, idxs = data
    b, s, i = torch.from_numpy(boxes), torch.from_numpy(scores), torch.from_numpy(idxs)
    assert _run(False, boxes, scores, idxs) == ops.nms(b, s, 0.5).tolist()
    assert _run(True, boxes, scores, idxs) == ops.batched_nms(b, s, i, 0.5).tolist()
