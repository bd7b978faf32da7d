"""Parity of a lowered artifact with eager PyTorch: the one owner of "are these the same outputs".

``match`` pairs detections by label and IoU and checks every per-detection field; ``rows`` cuts
lower()'s flat output leaves into detections for it; ``verify`` is lower()'s own check after
lowering. ``fxdeploy compare`` (fxdeploy.compare) and the tests use the same matcher.
"""

from __future__ import annotations

from fxdeploy.parity.match import CORNER_RTOL, Detections, ImageMatch, Rules, Tolerance, box_iou, match_image, pair

__all__ = ["CORNER_RTOL", "Detections", "ImageMatch", "Rules", "Tolerance", "box_iou", "match_image", "pair"]
