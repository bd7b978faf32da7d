"""Parity checks of lowered targets against eager PyTorch: tensors element-wise, detections by IoU.

Used by ``fxdeploy compare``, by the benchmark rows' error column, and by ``target="auto"``.
"""

from __future__ import annotations

from fxdeploy.compare.api import CompareReport, TargetComparison, compare
from fxdeploy.compare.detections import DetectionComparison
from fxdeploy.compare.outputs import Comparison, Tolerances, compare_outputs, max_abs_error, reference_outputs
from fxdeploy.compare.recognize import as_detections
from fxdeploy.compare.tensors import TensorComparison, compare_tensor
from fxdeploy.parity.match import Detections, ImageMatch, box_iou, match_image

__all__ = [
    "CompareReport",
    "Comparison",
    "DetectionComparison",
    "Detections",
    "ImageMatch",
    "TargetComparison",
    "TensorComparison",
    "Tolerances",
    "as_detections",
    "box_iou",
    "compare",
    "compare_outputs",
    "compare_tensor",
    "match_image",
    "max_abs_error",
    "reference_outputs",
]
