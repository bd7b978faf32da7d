"""ONNX Runtime executor."""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from fxdeploy.errors import LoweringError
from fxdeploy.runtime.executor import Executor, stream_count
from fxdeploy.runtime.executor import to_torch as _to_torch
from fxdeploy.settings import Settings


class OrtExecutor(Executor):
    """An InferenceSession with pinned threads. ORT's ``run`` is thread-safe, so no lock.

    The images of a per-image artifact's call run on several sessions at once, the threads split
    among them (``Settings.image_streams``): one session of two threads runs a small detector
    image by image at well under twice the speed of one thread. Those sessions are made on the
    first call that needs them."""

    thread_safe = True

    def __init__(self, model_path: Path, output_names: list[str], settings: Settings) -> None:
        super().__init__()
        self.model_path, self.settings = model_path, settings
        self.session = _session(model_path, settings.threads)
        self.output_names = list(output_names)
        self._streams: dict[int, tuple[ThreadPoolExecutor, list[Any]]] = {}
        self._streams_lock = threading.Lock()

    def run(self, feeds: dict[str, torch.Tensor], session: Any = None) -> dict[str, torch.Tensor]:
        arrays = {name: tensor.numpy() for name, tensor in feeds.items()}
        results = (session or self.session).run(self.output_names, arrays)
        return {name: _to_torch(a) for name, a in zip(self.output_names, results, strict=True)}

    def run_images(self, images: list[dict[str, torch.Tensor]]) -> list[dict[str, torch.Tensor]]:
        streams = stream_count(self.settings, len(images))
        if streams < 2:
            return super().run_images(images)
        pool, sessions = self._stream_sessions(streams)
        share = [images[k::streams] for k in range(streams)]  # stream k: images k, k + streams, ...
        futures = [pool.submit(lambda s, part: [self.run(f, s) for f in part], session, part)
                   for session, part in zip(sessions, share, strict=True)]
        outputs: list[Any] = [None] * len(images)
        for k, future in enumerate(futures):
            outputs[k::streams] = future.result()
        return outputs

    def _stream_sessions(self, streams: int) -> tuple[ThreadPoolExecutor, list[Any]]:
        with self._streams_lock:
            if streams not in self._streams:
                threads = self.settings.threads // streams
                sessions = [_session(self.model_path, threads) for _ in range(streams)]
                self._streams[streams] = (ThreadPoolExecutor(streams, "fxdeploy-ort"), sessions)
            return self._streams[streams]


def _session(model_path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 4  # a failing kernel's error comes back as the exception fxdeploy relays
    try:
        return ort.InferenceSession(str(model_path), sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - a missing kernel is said in fxdeploy's words, the rest relayed
        missing = _NO_KERNEL.search(str(exc))
        if missing is None:
            raise
        raise LoweringError(
            f"onnxruntime: its CPU provider has no kernel for {missing['op']} at the element types this graph "
            f"gives it (node {missing['node']!r}; float64 and bfloat16 lack many): compute that op in float32, "
            "or use target 'openvino' or 'torchscript'"
        ) from exc


_NO_KERNEL = re.compile(r"Could not find an implementation for (?P<op>\S+?) node with name '(?P<node>[^']*)'")


def version() -> str | None:
    try:
        import onnxruntime
    except ImportError:
        return None
    return onnxruntime.__version__
