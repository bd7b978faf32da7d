"""OpenVINO executor: one CompiledModel, one infer request per calling thread."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import torch

from fxdeploy.errors import ArtifactError, InputError, LoweringError, TargetUnavailableError
from fxdeploy.runtime.executor import Executor, stream_count
from fxdeploy.runtime.openvino_static import StaticShapes
from fxdeploy.settings import Settings

_FAILED_OP = re.compile(r"^-- (\S+) with a message:\n(.*?)(?:\n\n|\Z)", re.M | re.S)
"""One block of the ONNX frontend's "Model wasn't fully converted" log: the op, then its check,
node and reason, the reason last."""
_INT32 = torch.iinfo(torch.int32)
_PRECISION_HINTS = {"fp32": "f32", "fp16": "f16", "bf16": "bf16", "int8": "f32"}  # int8: its float region in f32


class OpenVinoExecutor(Executor):
    """Thread-safe through per-thread infer requests.

    An OpenVINO InferRequest must not be used by two threads at once, while the CompiledModel
    may be shared; each thread therefore lazily creates its own request (kept in a
    ``threading.local``), and concurrent ``execute`` calls need no lock.

    The images of a per-image artifact's call run on several CPU streams at once (see
    ``run_images``): one stream of two threads runs a small detector image by image at well
    under twice the speed of one thread.
    """

    thread_safe = True

    def __init__(self, model_path: Path, output_names: list[str], settings: Settings) -> None:
        import openvino

        super().__init__()
        self.config = compile_config(settings)
        core = openvino.Core()
        if settings.precision == "bf16":
            require_bf16(core)
        self.compiled = core.compile_model(read_model(core, model_path), "CPU", self.config)
        self.output_names = list(output_names)
        known = {name for port in self.compiled.outputs for name in port.get_names()}
        missing = [name for name in self.output_names if name not in known]
        if missing:
            raise ArtifactError(
                f"openvino: outputs {missing} of the manifest are not outputs of {model_path} "
                f"(it has {sorted(known)})"
            )
        # positions in the model's input and output lists (a port's own get_index() is its node's)
        positions = {name: i for i, port in enumerate(self.compiled.outputs) for name in port.get_names()}
        self._outputs = [positions[name] for name in self.output_names]
        self._inputs = {name: i for i, port in enumerate(self.compiled.inputs) for name in port.get_names()}
        self._tensor, self._bf16 = openvino.Tensor, openvino.Type.bf16
        self._local = threading.local()
        self.settings, self.model_path, self._core = settings, model_path, core
        self._streamed: dict[int, Any] = {}
        self._streams_lock = threading.Lock()
        dynamic = any(port.get_partial_shape().is_dynamic for port in self.compiled.inputs)
        self._static = StaticShapes(dynamic, settings.openvino.static_shapes, self._compile_static)

    def _request(self, feeds: dict[str, torch.Tensor]) -> Any:
        """This thread's request on the model compiled for these shapes, or on the dynamic one."""
        static = None
        if self._static.limit:  # a static model compiles nothing more: no key to build
            shapes = tuple(sorted((self._inputs[name], tuple(value.shape)) for name, value in feeds.items()
                                  if name in self._inputs))
            static = self._static.compiled(shapes) if len(shapes) == len(self._inputs) else None
        if static is not None:
            mine = self._local.__dict__.setdefault("static", {})
            if shapes not in mine:
                mine[shapes] = static.create_infer_request()
            return mine[shapes]
        request = getattr(self._local, "request", None)
        if request is None:
            request = self._local.request = self.compiled.create_infer_request()
        return request

    def _compile_static(self, shapes: dict[int, list[int]]) -> Any:
        model = read_model(self._core, self.model_path)
        model.reshape(shapes)
        return self._core.compile_model(model, "CPU", self.config)

    def check(self, feeds: dict[str, torch.Tensor]) -> None:
        """An int64 input past int32: OpenVINO's CPU plugin computes int64 as int32, so the value would be
        cut to its low 32 bits (``2**31 + 1`` computed as -2147483647) and the outputs silently wrong."""
        for name, value in feeds.items():
            if value.dtype != torch.int64 or value.numel() == 0:
                continue
            low, high = int(value.min()), int(value.max())
            if low < _INT32.min or high > _INT32.max:
                past = low if low < _INT32.min else high
                raise InputError(
                    f"openvino: input {name!r} holds {past}, past int32's range: OpenVINO's CPU plugin computes "
                    "int64 as int32 and would compute with its low 32 bits. Keep the values within "
                    "[-2**31, 2**31), or lower for target 'onnxruntime' or 'torchscript', which compute int64"
                )

    def run(self, feeds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        request = self._request(feeds)
        self._fill(request, feeds)
        request.infer()
        return self._read(request)

    def _fill(self, request: Any, feeds: dict[str, torch.Tensor]) -> None:
        """Inputs set as tensors sharing the callers' memory. ``InferRequest.infer(dict)`` does the
        same work behind a dict conversion that cost ~28 us a call in place (YOLOS, 0.5 ms)."""
        for name, value in feeds.items():
            index = self._inputs.get(name)
            if index is None:
                raise ArtifactError(
                    f"openvino: the compiled model has no input {name!r} (it has {sorted(self._inputs)})"
                )
            request.set_input_tensor(index, self._as_tensor(value))

    def _as_tensor(self, value: torch.Tensor) -> Any:
        """An OpenVINO tensor sharing ``value``'s memory; bfloat16, which numpy lacks, as its bits."""
        if value.dtype != torch.bfloat16:
            return self._tensor(value.numpy(), shared_memory=True)
        bits = value.contiguous().view(torch.int16).numpy()
        return self._tensor(bits, list(value.shape), self._bf16)

    def _read(self, request: Any) -> dict[str, torch.Tensor]:
        """Outputs copied out of the request's buffers (its next call reuses them). A bfloat16
        output's ``data`` is its bits typed as numpy's float16: read back as bfloat16."""
        outputs = []
        for name, index in zip(self.output_names, self._outputs, strict=True):
            tensor = request.get_output_tensor(index)
            value = torch.from_numpy(tensor.data.copy())
            outputs.append((name, value.view(torch.bfloat16) if tensor.element_type == self._bf16 else value))
        return dict(outputs)

    def run_images(self, images: list[dict[str, torch.Tensor]]) -> list[dict[str, torch.Tensor]]:
        """Per-image artifacts: ``streams`` images at once, on a second CompiledModel with that many
        CPU streams (compiled on the first call that needs it), the threads split among them."""
        streams = stream_count(self.settings, len(images))
        if streams < 2:
            return super().run_images(images)
        requests = self._stream_requests(streams)
        outputs = []
        for start in range(0, len(images), streams):
            wave = list(zip(requests, images[start : start + streams], strict=False))
            for request, feeds in wave:
                self._fill(request, feeds)
                request.start_async()
            for request, _ in wave:
                request.wait()
                outputs.append(self._read(request))
        return outputs

    def _stream_requests(self, streams: int) -> list[Any]:
        """This thread's requests on the model compiled for ``streams`` streams."""
        mine = self._local.__dict__.setdefault("streams", {})
        if streams not in mine:
            with self._streams_lock:
                if streams not in self._streamed:
                    config = dict(self.config, NUM_STREAMS=streams, PERFORMANCE_HINT="THROUGHPUT")
                    core = self._core
                    self._streamed[streams] = core.compile_model(read_model(core, self.model_path), "CPU", config)
            mine[streams] = [self._streamed[streams].create_infer_request() for _ in range(streams)]
        return mine[streams]


def read_model(core: Any, model: Path | bytes) -> Any:
    """The ONNX model as OpenVINO reads it, with every TopK stable, as ONNX's TopK is.

    ONNX breaks TopK ties by the lower index; OpenVINO's ONNX frontend (2026.4) makes its TopK with
    ``stable=False``, which orders ties arbitrarily. A model's own TopK (a detector's top-k
    candidates or query selection) rests on that rule, so it is restored here, before compiling,
    except on the TopKs that multiclass_nms marks tie-free (``TIE_FREE``): their result does not
    depend on the order of ties, and OpenVINO's stable TopK costs tens of times its unstable one.
    """
    try:
        ov_model = core.read_model(model if isinstance(model, bytes) else str(model))
    except RuntimeError as exc:
        failed = _FAILED_OP.findall(str(exc))
        if not failed:
            raise
        ops = "; ".join(f"{op} ({block.strip().splitlines()[-1]})" for op, block in failed)
        raise LoweringError(
            f"openvino: OpenVINO's ONNX frontend could not convert op(s) of the model: {ops}. It lacks them at "
            "these types or shapes (a dynamic size among them, where one is declared): use target 'onnxruntime' "
            "or 'torchscript', or lower for OpenVINO at fixed sizes"
        ) from exc
    return with_stable_topks(ov_model)


def with_stable_topks(ov_model: Any) -> Any:
    """``ov_model`` with the TopKs that ``read_model`` describes made stable."""
    from fxdeploy.artifact.onnx_files import TIE_FREE

    for node in ov_model.get_ops():
        if node.get_type_name() != "TopK" or node.get_attributes().get("stable") is not False:
            continue
        names = {name for output in node.outputs() for name in output.get_names()}
        if not any(name.startswith(TIE_FREE) for name in names):
            node.set_attribute("stable", True)
    return ov_model


def require_bf16(core: Any) -> None:
    """bf16 only where the CPU computes it natively: elsewhere OpenVINO would run it at f32, unasked."""
    capabilities = list(core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    if "BF16" not in capabilities:
        raise TargetUnavailableError(
            f"openvino: precision 'bf16' needs a CPU with native bf16 (AVX512_BF16 or AMX); this CPU's "
            f"OPTIMIZATION_CAPABILITIES are {capabilities}"
        )


def compile_config(settings: Settings) -> dict[str, Any]:
    """Explicit precision: OpenVINO's CPU plugin defaults to bf16 where the CPU has it."""
    return {
        "INFERENCE_NUM_THREADS": settings.threads,
        "INFERENCE_PRECISION_HINT": _PRECISION_HINTS[settings.precision],
        "PERFORMANCE_HINT": "LATENCY",
        "NUM_STREAMS": 1,
    }


def version() -> str | None:
    try:
        import openvino
    except ImportError:
        return None
    return openvino.__version__
