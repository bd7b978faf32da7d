"""INT8 for OpenVINO: NNCF's post-training quantization (``nncf.quantize``) of the lowered model
as OpenVINO reads it, the graph's float region as its ignored scope (``float_region``), saved as
OpenVINO IR (model.xml, model.bin) in place of the ONNX. NNCF's OpenVINO backend inserts
FakeQuantize nodes that OpenVINO's low-precision transformations run in int8 (u8 activations,
i8 weights); the float region runs in f32.

Why the IR and not NNCF's QDQ ONNX: OpenVINO 2026.4's CPU plugin computes a QDQ ONNX wrongly where
a dequantized value feeds a Split whose outputs go both to a conv and to an Add/Concat (every
C2f/C3k2 block of a YOLO): the conv's output differs from ONNX Runtime's on the same file by
the size of the value itself (YOLO11n: 2 of eager's 2163 detections kept, against 1030 on ONNX
Runtime). Quantizing the ``openvino.Model`` avoids the QDQ import altogether. The model is read
with ``openvino.convert_model``, whose fusions make each SiLU one Swish op: NNCF then quantizes
around conv + Swish, which the CPU plugin fuses, rather than between a conv and its SiLU's
Sigmoid and Multiply (YOLO11n at batch 8: 22 ms of unfused f32 SiLU subgraphs).

The preset is NNCF's MIXED (symmetric weights, asymmetric activations): SiLU/GELU outputs reach
below zero by a fraction of their positive range, which a symmetric int8 range wastes half of.
NNCF's range estimators stand in for the calibration methods. "minmax" is NNCF's own default
for activations, the mean over the calibration batches of each batch's min and max (weights take
their exact min/max): the min/max over every batch widens each range by its one outlier, and on
YOLO11n at batch 8 keeps 942 of eager's 2163 detections against 1047 (benchmarks/yolo_int8_peer.py).
"percentile" is its mean of per-batch quantiles; it has no entropy calibration, so "entropy" is
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
ESTIMATORS = {"minmax": "MEAN_MINMAX", "percentile": "MEAN_QUANTILE"}
IR_FILES = ("model.xml", "model.bin")


def quantize(model_path: Path, calibrated: Calibrated) -> tuple[dict[str, Any], list[str]]:
    """NNCF's INT8 model of ``model_path`` (an ONNX) written beside it as IR, the ONNX (and its
    external data) removed; returns what the manifest records and the artifact's files."""
    calibration, samples = calibrated.calibration, calibrated.samples
    if calibration.method not in ESTIMATORS:
        raise FxDeployError(f"Calibration.method {calibration.method!r}: the openvino target (NNCF) calibrates "
                            f"with {sorted(ESTIMATORS)}")
    try:
        import nncf
        import openvino
    except ImportError as exc:
        raise FxDeployError("INT8 on the openvino target needs NNCF: pip install fxdeploy[openvino]") from exc
    import onnx
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters
    from nncf.quantization.range_estimator import RangeEstimatorParametersSet

    from fxdeploy.runtime.openvino import with_stable_topks

    keep = float_nodes(onnx.load(str(model_path), load_external_data=False))
    model = with_stable_topks(openvino.convert_model(str(model_path)))  # fused: x * sigmoid(x) is one Swish
    estimator = getattr(RangeEstimatorParametersSet, ESTIMATORS[calibration.method])
    with _quiet():
        quantized = nncf.quantize(
            model, nncf.Dataset(samples), subset_size=len(samples), preset=nncf.QuantizationPreset.MIXED,
            ignored_scope=nncf.IgnoredScope(names=_ov_names(model, keep), validate=False),
            advanced_parameters=AdvancedQuantizationParameters(activations_range_estimator_params=estimator),
        )
    _save_ir(openvino, quantized, model_path.parent)
    for stale in (model_path, model_path.with_name(model_path.name + ".data")):
        stale.unlink(missing_ok=True)
    info = {
        "format": "OpenVINO IR with FakeQuantize (NNCF), run by OpenVINO's low-precision transformations",
        "tool": f"nncf {nncf.__version__}",
        "activations": "uint8, asymmetric (NNCF's mixed preset)", "weights": "int8, symmetric, per channel",
        "calibration": {"samples": len(samples), "method": calibration.method},
        "float_ops": keep,
    }
    return info, list(IR_FILES)


def _ov_names(model: Any, onnx_names: dict[str, str]) -> list[str]:
    """The OpenVINO ops made from the named ONNX nodes. OpenVINO's ONNX frontend keeps a node's name,
    and names the ops it splits a node into after it: a Conv with a bias becomes the Convolution
    "<name>/WithoutBiases" and the Add "<name>"; both are the node."""
    def made_from(name: str) -> bool:
        parts = name.split("/")  # an ONNX name may hold "/" itself: try each prefix
        return any("/".join(parts[:k]) in onnx_names for k in range(1, len(parts) + 1))

    return sorted(op.get_friendly_name() for op in model.get_ops() if made_from(op.get_friendly_name()))


def _save_ir(openvino: Any, model: Any, folder: Path) -> None:
    """model.xml and model.bin, each replaced atomically; the weights stay f32 (no fp16 compression)."""
    staging = Path(tempfile.mkdtemp(prefix=".ir-", dir=folder))
    try:
        openvino.save_model(model, str(staging / IR_FILES[0]), compress_to_fp16=False)
        for name in reversed(IR_FILES):  # the weights first: model.xml names them
            os.replace(staging / name, folder / name)
    finally:
        for leftover in staging.iterdir():
            leftover.unlink()
        staging.rmdir()


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """NNCF logs at info level and draws progress bars on stdout: both go to fxdeploy's debug log.
    Its backend probe imports ``nncf.torch``, whose ``torch.utils.cpp_extension`` warns "No CUDA
    runtime is found" under a CUDA build of torch on a machine without a GPU: that goes unsaid."""
    nncf_logger, cpp_logger = logging.getLogger("nncf"), logging.getLogger("torch.utils.cpp_extension")
    levels = nncf_logger.level, cpp_logger.level
    nncf_logger.setLevel(logging.WARNING)
    cpp_logger.setLevel(logging.ERROR)
    shown = io.StringIO()
    try:
        with contextlib.redirect_stdout(shown):
            yield
    finally:
        nncf_logger.setLevel(levels[0])
        cpp_logger.setLevel(levels[1])
        if shown.getvalue().strip():
            logger.debug("nncf: %s", shown.getvalue().strip())
