"""ONNX Runtime executor."""

from __future__ import annotations

from pathlib import Path

import torch

from fxdeploy.runtime.executor import Executor
from fxdeploy.runtime.executor import to_torch as _to_torch
from fxdeploy.settings import Settings


class OrtExecutor(Executor):
    """An InferenceSession with pinned threads. ORT's ``run`` is thread-safe, so no lock."""

    thread_safe = True

    def __init__(self, model_path: Path, output_names: list[str], settings: Settings) -> None:
        import onnxruntime as ort

        super().__init__()
        options = ort.SessionOptions()
        options.intra_op_num_threads = settings.threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        self.session = ort.InferenceSession(
            str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self.output_names = list(output_names)

    def _run(self, feeds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        arrays = {name: tensor.numpy() for name, tensor in feeds.items()}
        results = self.session.run(self.output_names, arrays)
        return {name: _to_torch(a) for name, a in zip(self.output_names, results, strict=True)}


def version() -> str | None:
    try:
        import onnxruntime
    except ImportError:
        return None
    return onnxruntime.__version__
