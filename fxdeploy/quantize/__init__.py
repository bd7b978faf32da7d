"""INT8: calibration data (``Calibration``), the float region decided from the graph
(``float_region``), and each target's quantizer (``onnxruntime``), imported where used."""

from __future__ import annotations

from fxdeploy.quantize.calibration import Calibration, as_calibration, read_samples

__all__ = ["Calibration", "as_calibration", "read_samples"]
