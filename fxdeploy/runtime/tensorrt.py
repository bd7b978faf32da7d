"""TensorRT executor: named I/O tensors, torch CUDA buffers, ``execute_async_v3`` on a torch stream."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from fxdeploy.errors import ArtifactError, InputError
from fxdeploy.runtime.executor import Executor


class TensorRTExecutor(Executor):
    """Not thread-safe: one IExecutionContext holds the input shapes and tensor addresses of the
    call in flight, so Deployed serializes calls (``thread_safe = False``).

    ``run`` only enqueues work (copies in, the engine, copies out to pinned host memory) on one
    CUDA stream; ``synchronize`` waits for that stream, inside the timed region.
    """

    thread_safe = False

    def __init__(self, plan_path: Path, output_names: list[str], profile: dict[str, Any]) -> None:
        import tensorrt as trt

        super().__init__()
        self._trt = trt
        self.device = torch.device("cuda", torch.cuda.current_device())
        self.runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
        self.engine = self.runtime.deserialize_cuda_engine(plan_path.read_bytes())
        if self.engine is None:
            raise ArtifactError(
                f"tensorrt: cannot deserialize {plan_path}; engines only load with the TensorRT "
                f"version and GPU that built them (this is TensorRT {trt.__version__} on "
                f"{torch.cuda.get_device_name(self.device)})"
            )
        self.context = self.engine.create_execution_context()
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.inputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.output_names = list(output_names)
        missing = sorted(set(self.output_names) - set(names))
        if missing:
            raise ArtifactError(f"tensorrt: engine {plan_path} has no output(s) {missing}; it has {names}")
        self.profile = profile
        self.stream = torch.cuda.Stream(self.device)
        self._in_flight: Any = None

    def check(self, feeds: dict[str, torch.Tensor]) -> None:
        for name in self.inputs:
            self._check_profile(name, tuple(feeds[name].shape))

    def run(self, feeds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        with torch.cuda.stream(self.stream):
            device_inputs = {name: feeds[name].to(self.device, non_blocking=True) for name in self.inputs}
            for name, tensor in device_inputs.items():
                self.context.set_input_shape(name, tuple(tensor.shape))
                self.context.set_tensor_address(name, tensor.data_ptr())
            device_outputs = {name: self._output_buffer(name) for name in self.output_names}
            if not self.context.execute_async_v3(self.stream.cuda_stream):
                raise RuntimeError("tensorrt: execute_async_v3 failed; the TensorRT log says why")
            outputs = {
                name: torch.empty(t.shape, dtype=t.dtype, pin_memory=True).copy_(t, non_blocking=True)
                for name, t in device_outputs.items()
            }
        self._in_flight = (device_inputs, device_outputs)  # alive until the stream is synchronized
        return outputs

    def _output_buffer(self, name: str) -> torch.Tensor:
        shape = tuple(self.context.get_tensor_shape(name))
        dtype = _torch_dtype(self._trt, self.engine.get_tensor_dtype(name))
        buffer = torch.empty(shape, dtype=dtype, device=self.device)
        self.context.set_tensor_address(name, buffer.data_ptr())
        return buffer

    def synchronize(self) -> None:
        self.stream.synchronize()
        self._in_flight = None

    def _check_profile(self, name: str, shape: tuple[int, ...]) -> None:
        bounds = self.profile.get(name)
        if not bounds:
            return
        for axis, (size, low, high) in enumerate(zip(shape, bounds["min"], bounds["max"], strict=True)):
            if not low <= size <= high:
                raise InputError(
                    f"input {name!r}: dim {axis} is {size}, outside the TensorRT optimization profile "
                    f"[{low}, {high}] the engine was built with"
                )


def _torch_dtype(trt: Any, dtype: Any) -> torch.dtype:
    table = {
        trt.float32: torch.float32, trt.float16: torch.float16, trt.bfloat16: torch.bfloat16,
        trt.int32: torch.int32, trt.int64: torch.int64, trt.int8: torch.int8, trt.uint8: torch.uint8,
        trt.bool: torch.bool,
    }
    if dtype not in table:
        raise ArtifactError(f"tensorrt: output dtype {dtype} has no torch equivalent")
    return table[dtype]


def version() -> str | None:
    try:
        import tensorrt
    except Exception:  # noqa: BLE001 - a placeholder or broken install is "not installed"
        return None
    return getattr(tensorrt, "__version__", None)
