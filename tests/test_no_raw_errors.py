"""Nothing raw escapes lower() or Deployed: a runtime's own exception becomes an InferenceError
that names the target and the input shapes, and an unexpected failure inside lower() a
LoweringError that names the target, the inputs and what to do. The runtime failures are stand-ins
(a raising engine call): the wrapping is what is under test."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import fxdeploy
from examples import models
from fxdeploy import api
from fxdeploy.runtime.onnxruntime import OrtExecutor


def _failing(self: Any, feeds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    raise RuntimeError("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Attempting to broadcast an axis by a dimension "
                       "other than 1. 5 by 17\nsecond line")


def test_a_runtime_failure_in_a_call_is_an_inference_error(monkeypatch: pytest.MonkeyPatch) -> None:
    model, (x,) = models.convnet()
    deployed = fxdeploy.lower(model, (x,), dynamic_shapes={"x": {0: "batch"}})
    monkeypatch.setattr(OrtExecutor, "run", _failing)
    with pytest.raises(fxdeploy.InferenceError) as info:
        deployed(torch.randn(3, 3, 64, 64))
    message = str(info.value)
    assert message.startswith("onnxruntime: the runtime failed on inputs {'x': (3, 3, 64, 64)}")
    assert "RuntimeError: [ONNXRuntimeError]" in message and "5 by 17" in message and "second line" not in message
    assert isinstance(info.value.__cause__, RuntimeError)


def test_a_runtime_failure_in_lowers_checks_is_a_lowering_error(monkeypatch: pytest.MonkeyPatch) -> None:
    model, (x,) = models.convnet()
    monkeypatch.setattr(OrtExecutor, "run", _failing)
    with pytest.raises(fxdeploy.LoweringError, match=r"target 'onnxruntime': the lowered artifact failed lower\(\)'s "
                       r"check: onnxruntime: the runtime failed on inputs \{'x': \(\d+, 3, 64, 64\)\}"):
        fxdeploy.lower(model, (x,), dynamic_shapes={"x": {0: "batch"}})


def test_an_unexpected_failure_inside_lower_is_a_lowering_error(monkeypatch: pytest.MonkeyPatch) -> None:
    model, (x,) = models.convnet()

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("stage")

    monkeypatch.setattr(api, "run_pipeline", broken)
    with pytest.raises(fxdeploy.LoweringError, match=r"target 'onnxruntime': lowering failed on inputs "
                       r"\[\(2, 3, 64, 64\)\]: KeyError: 'stage'\. fxdeploy did not expect"):
        fxdeploy.lower(model, (x,))


def test_bad_dynamic_shapes_are_an_input_error() -> None:
    model, (x,) = models.convnet()
    with pytest.raises(fxdeploy.InputError, match=r"dynamic_shapes names \['images'\] are not inputs"):
        fxdeploy.lower(model, (x,), dynamic_shapes={"images": {0: "batch"}})


def test_a_pipeline_that_never_describes_its_outputs_is_told_how_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plugin's pipeline without tensorize_outputs leaves the graph record without output
    leaves: lower() says which pass to end the pipeline with, instead of a KeyError."""
    import dataclasses

    from fxdeploy.passes.pipelines import CLEANUP

    real = api.get_target("onnxruntime")
    monkeypatch.setattr(api, "get_target", lambda name: dataclasses.replace(real, pipeline=CLEANUP))
    model, (x,) = models.convnet()
    with pytest.raises(fxdeploy.LoweringError, match="never described the outputs; end it with .*tensorize_outputs"):
        fxdeploy.lower(model, (x,), settings=fxdeploy.Settings(cache=fxdeploy.settings.CacheSettings(enabled=False)))


def test_a_relayed_message_reads_past_cpp_locations_and_headings() -> None:
    """OpenVINO's own reason comes lines below "Exception from src/inference/src/cpp/core.cpp:84:"."""
    from fxdeploy.errors import first_line

    openvino = RuntimeError(
        "Exception from src/inference/src/cpp/core.cpp:84:\n"
        "Check 'false' failed at src/frontends/common_translators/src/unconverted_ops_report.cpp:151:\n"
        "FrontEnd API failed with OpConversionFailure:\n-- Pad-23 with a message:\n"
        "Unsupported padding mode: [wrap]\n\nSummary:\n-- Conversion is failed for: Pad-23\n"
    )
    assert first_line(openvino) == ("RuntimeError: FrontEnd API failed with OpConversionFailure: -- Pad-23 with a "
                                    "message: Unsupported padding mode: [wrap]")
    assert first_line(ValueError("one line\nthe next")) == "ValueError: one line"
    assert first_line(RuntimeError("Exception from src/a.cpp:3:")) == "RuntimeError: Exception from src/a.cpp:3:"
    onnxruntime = RuntimeError(  # ONNX Runtime's reason comes after the C++ signature, in the same line
        "[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running Attention node. Name:'sdpa' "
        "Status Message: /onnxruntime_src/onnxruntime/core/providers/cpu/llm/attention_helper.h:70 "
        "onnxruntime::common::Status onnxruntime::attention_helper::ComputeOutputShapeForAttention(const "
        "onnxruntime::Tensor*, bool, float, AttentionParameters&, onnxruntime::TensorShape&, bool) attn_mask == "
        "nullptr was false. inconsistent q_sequence_length (between attn_mask and Q)"
    )
    assert first_line(onnxruntime) == (
        "RuntimeError: [ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running Attention node. "
        "Name:'sdpa' Status Message: attn_mask == nullptr was false. inconsistent q_sequence_length (between "
        "attn_mask and Q)")
