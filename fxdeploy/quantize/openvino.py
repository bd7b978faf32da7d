"""INT8 for OpenVINO: NNCF's post-training quantization (``nncf.quantize``) of the lowered
model.onnx, the graph's float region as its ignored scope (``float_region``). NNCF writes QDQ
nodes into the ONNX; OpenVINO's low-precision transformations run the quantized layers in int8
(u8 activations, i8 weights) and the float region in f32.

NNCF's range estimators stand in for the calibration methods: "minmax" is its min/max, and
"percentile" its mean of per-sample quantiles; it has no entropy calibration, so "entropy" is
refused with the methods it has.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fxdeploy.errors import FxDeployError
from fxdeploy.quantize.calibration import Calibrated
from fxdeploy.quantize.float_region import float_nodes

logger = logging.getLogger(__name__)
ESTIMATORS = {"minmax": "MINMAX", "percentile": "MEAN_QUANTILE"}


def quantize(model_path: Path, calibrated: Calibrated) -> dict[str, Any]:
    """Replace ``model_path`` by NNCF's INT8 model (atomically); returns what the manifest records."""
    calibration, samples = calibrated.calibration, calibrated.samples
    if calibration.method not in ESTIMATORS:
        raise FxDeployError(f"Calibration.method {calibration.method!r}: the openvino target (NNCF) calibrates "
                            f"with {sorted(ESTIMATORS)}")
    try:
        import nncf
    except ImportError as exc:
        raise FxDeployError("INT8 on the openvino target needs NNCF: pip install fxdeploy[openvino]") from exc
    import onnx
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters
    from nncf.quantization.range_estimator import RangeEstimatorParametersSet

    model = onnx.load(str(model_path))
    keep = float_nodes(model)
    estimator = getattr(RangeEstimatorParametersSet, ESTIMATORS[calibration.method])
    with _quiet():
        quantized = nncf.quantize(
            model, nncf.Dataset(samples), subset_size=len(samples),
            ignored_scope=nncf.IgnoredScope(names=sorted(keep), validate=False),
            advanced_parameters=AdvancedQuantizationParameters(activations_range_estimator_params=estimator),
        )
    fd, tmp = tempfile.mkstemp(suffix=".onnx", dir=model_path.parent)
    os.close(fd)
    try:
        onnx.save(quantized, tmp)
        os.replace(tmp, model_path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return {
        "format": "QDQ (NNCF), run by OpenVINO's low-precision transformations", "tool": f"nncf {nncf.__version__}",
        "activations": "uint8 or int8 (NNCF's performance preset)", "weights": "int8, per channel",
        "calibration": {"samples": len(samples), "method": calibration.method},
        "float_ops": keep,
    }


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """NNCF logs at info level and draws progress bars on stdout: both go to fxdeploy's debug log."""
    nncf_logger = logging.getLogger("nncf")
    level = nncf_logger.level
    nncf_logger.setLevel(logging.WARNING)
    shown = io.StringIO()
    try:
        with contextlib.redirect_stdout(shown):
            yield
    finally:
        nncf_logger.setLevel(level)
        if shown.getvalue().strip():
            logger.debug("nncf: %s", shown.getvalue().strip())
