"""torchvision's Mask R-CNN, as torchvision ships it: its masks are pasted into the image one
detection at a time, each at a size its box's values decide, which no static graph holds. lower()
refuses it at capture, in fxdeploy's words: the line that branched (paste_mask_in_image's slice
by the box's values), the function looping over the detections, and the substitution to write;
not torch's "Could not guard on data-dependent expression"."""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from fxdeploy.errors import CaptureError
from tests.detectors.conftest import require
from tests.helpers import require_target


@pytest.mark.full  # its capture runs minutes before the paste refuses it: make test-full runs it
def test_mask_rcnn_is_refused_naming_the_paste_and_what_to_substitute() -> None:
    require("torchvision")
    require_target("onnxruntime")
    from torchvision.models import detection

    from examples.torchvision_detectors import SIZE, Detector, images

    torch.manual_seed(0)
    model = detection.maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, min_size=SIZE, max_size=SIZE)
    with pytest.raises(CaptureError) as info:
        fxdeploy.lower(Detector(model.eval()), (images(1, 0),), target="onnxruntime")
    message = str(info.value)
    assert "paste_mask_in_image" in message, message
    assert "@fxdeploy.substitute(torchvision.models.detection.roi_heads." in message, message
    assert "Could not guard on data-dependent" not in message, message
