"""Every target's pass pipeline, in one place, in order. Each ordering constraint is commented."""

from __future__ import annotations

from fxdeploy.passes.base import Pass
from fxdeploy.passes.remove_asserts import remove_asserts
from fxdeploy.passes.remove_dropout import remove_dropout
from fxdeploy.passes.remove_noops import remove_noops
from fxdeploy.passes.tensorize_outputs import tensorize_outputs

# Cleanup first: asserts and dropout would otherwise hide NMS consumers from pattern matching.
CLEANUP: tuple[Pass, ...] = (remove_asserts, remove_dropout, remove_noops)

# tensorize_outputs runs last: earlier passes may add or replace outputs (substitute_nms does).
ONNX: tuple[Pass, ...] = (*CLEANUP, tensorize_outputs)
TORCHSCRIPT: tuple[Pass, ...] = (*CLEANUP, tensorize_outputs)

PIPELINES: dict[str, tuple[Pass, ...]] = {
    "onnxruntime": ONNX,
    "openvino": ONNX,
    "tensorrt": ONNX,
    "ncnn": TORCHSCRIPT,
    "torchscript": TORCHSCRIPT,
}


def pipeline_for(target: str) -> tuple[Pass, ...]:
    try:
        return PIPELINES[target]
    except KeyError:
        raise KeyError(f"no pass pipeline for target {target!r}; known: {sorted(PIPELINES)}") from None
