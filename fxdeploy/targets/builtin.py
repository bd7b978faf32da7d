"""The built-in targets, registered explicitly and in a fixed order."""

from __future__ import annotations

from collections.abc import Callable

from fxdeploy.targets.base import Target


def register_all(register: Callable[[Target], Target]) -> None:
    """Each module below imports its runtime package only inside functions, when used."""
    from fxdeploy.targets import ncnn, onnxruntime, openvino, tensorrt, torchscript

    for target in (onnxruntime.TARGET, openvino.TARGET, ncnn.TARGET, tensorrt.TARGET, torchscript.TARGET):
        register(target)
