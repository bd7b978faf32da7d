"""OpenVINO: a model with dynamic input dims compiled again for the exact shapes it keeps seeing.

OpenVINO's CPU plugin runs a dynamic-shaped model with shape inference and memory planning at
every call, and fuses fewer of its elementwise ops; the same model reshaped to one call's static
shapes runs 7-15% faster (YOLO11n at batch 1 and 8, `benchmarks/README.md`, "OpenVINO at the
shapes it is called with"). So, per input shapes (``Settings.openvino.static_shapes``, at most):
- a shape's first call runs the dynamic model: a shape called once is not worth a compile;
- its second call compiles a model for exactly those shapes (once, under a lock), used from then on;
- a shape whose compile fails stays on the dynamic model (logged at debug level); so do all
  shapes past the limit, and every call when the model's inputs are static already.
Both models are the same graph; the check in ``tests/runtime/test_openvino_static.py`` holds
their outputs equal.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

Shapes = tuple[tuple[int, tuple[int, ...]], ...]  # (input index, shape), by index
_MAX_COUNTED = 1024  # distinct shapes whose calls are counted; past it, new shapes stay dynamic


class StaticShapes:
    """Compiled models for static input shapes, shared by the executor's threads."""

    def __init__(self, dynamic: bool, limit: int, compile_for: Callable[[dict[int, list[int]]], Any]) -> None:
        """``dynamic``: whether any input dim is dynamic; ``compile_for``: {input index: shape} -> CompiledModel."""
        self.limit = limit if dynamic else 0
        self._compile_for = compile_for
        self._seen: dict[Shapes, int] = {}
        self._compiled: dict[Shapes, Any] = {}  # None: its compile failed
        self._lock = threading.Lock()

    def compiled(self, shapes: Shapes) -> Any | None:
        """The model compiled for ``shapes``, or None where the dynamic model runs this call."""
        if not self.limit:
            return None
        model = self._compiled.get(shapes)
        if model is not None or shapes in self._compiled:
            return model
        with self._lock:
            if shapes in self._compiled:
                return self._compiled[shapes]
            seen = self._seen.get(shapes, 0) + 1
            if len(self._seen) < _MAX_COUNTED or shapes in self._seen:
                self._seen[shapes] = seen
            if seen < 2 or sum(m is not None for m in self._compiled.values()) >= self.limit:
                return None
            self._compiled[shapes] = model = self._compile(shapes)
            return model

    def _compile(self, shapes: Shapes) -> Any | None:
        try:
            return self._compile_for({index: list(shape) for index, shape in shapes})
        except Exception as error:  # noqa: BLE001 - OpenVINO raises RuntimeError and its own types; the dynamic model still runs
            logger.debug("openvino: no static model for input shapes %s (%s); the dynamic model runs", shapes, error)
            return None
