"""INT8 for ONNX Runtime: ``onnxruntime.quantization.quantize_static`` on the lowered model.onnx,
in QDQ format with per-channel weights, the graph's float region excluded (``float_region``).

Types (ONNX Runtime's guidance for x86 CPUs): activations uint8, weights int8 (U8S8). Without
VNNI, the U8S8 kernels can saturate their 16-bit intermediate sums; there the weights use 7 bits
(``reduce_range``). Which was chosen, and why, goes to the manifest.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fxdeploy.quantize.calibration import Calibrated
from fxdeploy.quantize.float_region import float_nodes

logger = logging.getLogger(__name__)
METHODS = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}


def cpu_has_vnni() -> bool:
    """Whether this CPU has VNNI (AVX512-VNNI or AVX-VNNI); False where the flags cannot be read."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return "avx512_vnni" in flags or "avx_vnni" in flags


def quantize(model_path: Path, calibrated: Calibrated, symmetric: bool = False) -> dict[str, Any]:
    """Replace ``model_path`` by its INT8 model (atomically); returns what the manifest records.
    ``symmetric``: int8 activations and weights, zero points 0, full range (what TensorRT's
    explicit quantization reads), instead of ONNX Runtime's CPU choice."""
    calibration, samples = calibrated.calibration, calibrated.samples
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    model = onnx.load(str(model_path), load_external_data=False)
    keep = float_nodes(model)
    vnni = cpu_has_vnni()
    reduce_range = not vnni and not symmetric
    types = ((QuantType.QInt8, QuantType.QInt8) if symmetric else (QuantType.QUInt8, QuantType.QInt8))
    fd, tmp = tempfile.mkstemp(suffix=".onnx", dir=model_path.parent)
    os.close(fd)
    try:
        with _quiet_root():
            quantize_static(
                str(model_path), tmp, _reader(samples), quant_format=QuantFormat.QDQ, per_channel=True,
                reduce_range=reduce_range, activation_type=types[0], weight_type=types[1],
                nodes_to_exclude=sorted(keep),
                extra_options={"ActivationSymmetric": True, "WeightSymmetric": True} if symmetric else None,
                calibrate_method=getattr(CalibrationMethod, METHODS[calibration.method]),
            )
        os.replace(tmp, model_path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    if symmetric:
        why = "symmetric int8 (zero points 0): TensorRT's explicit quantization"
    elif vnni:
        why = f"{platform.machine()} CPU with VNNI: full-range int8 weights"
    else:
        why = "no VNNI on this CPU: 7-bit weights (reduce_range), so U8S8 sums cannot saturate"
    return {
        "format": "QDQ", "activations": "int8, symmetric" if symmetric else "uint8", "weights": "int8, per channel",
        "reduce_range": reduce_range, "why": why,
        "calibration": {"samples": len(samples), "method": calibration.method},
        "float_ops": keep,
    }


def _reader(samples: list[dict[str, np.ndarray]]) -> Any:
    """The samples as ONNX Runtime's CalibrationDataReader."""
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter(samples)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.items, None)

    return Reader()


@contextlib.contextmanager
def _quiet_root() -> Iterator[None]:
    """onnxruntime.quantization logs its advice ("consider pre-processing") on the root logger;
    while it runs, those records go to fxdeploy's debug log instead of the console."""

    def divert(record: logging.LogRecord) -> bool:
        if "onnxruntime" in record.pathname:
            logger.debug("onnxruntime.quantization: %s", record.getMessage())
            return False
        return True

    root = logging.getLogger()
    root.addFilter(divert)
    try:
        with warnings.catch_warnings():  # numpy's divide warnings for a constant (zero-range) tensor
            warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"onnxruntime\.")
            yield
    finally:
        root.removeFilter(divert)
