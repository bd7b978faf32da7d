"""Parity of a lowered artifact with eager PyTorch: the one owner of "are these the same outputs".

- ``match``: pairs detections by label and IoU and checks every per-detection field;
- ``outputs`` (with ``tensors``, ``detections``, ``recognize``): any output structure against
  eager's, tensors element-wise and detections through ``match``;
- ``rows`` and ``verify``: lower()'s flat output leaves cut into detections, and lower()'s own
  check after lowering (``lower_check``);
- ``check``: lower one target and check it, the routine behind ``compare`` and ``auto``;
- ``compare`` (with ``batches``): ``fxdeploy compare``, each target lowered and checked;
- ``auto``: ``target="auto"``, the fastest target that matches.
"""

from __future__ import annotations

from fxdeploy.parity.boxes import CORNER_RTOL, Detections, box_iou
from fxdeploy.parity.detections import DetectionComparison
from fxdeploy.parity.match import ImageMatch, Rules, Tolerance, match_image, pair
from fxdeploy.parity.outputs import Comparison, Tolerances, compare_outputs, max_abs_error, reference_outputs
from fxdeploy.parity.recognize import as_detections
from fxdeploy.parity.tensors import TensorComparison, compare_tensor

__all__ = [
    "CORNER_RTOL",
    "Comparison",
    "DetectionComparison",
    "Detections",
    "ImageMatch",
    "Rules",
    "TensorComparison",
    "Tolerance",
    "Tolerances",
    "as_detections",
    "box_iou",
    "compare_outputs",
    "compare_tensor",
    "match_image",
    "max_abs_error",
    "pair",
    "reference_outputs",
]
