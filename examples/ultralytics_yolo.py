"""Ultralytics YOLO detect models, built from their yaml (no weights), followed by Ultralytics'
own ``non_max_suppression``: the way its users write a deployable detector. No substitution.

Random weights give degenerate scores (BatchNorm at its initial statistics lets activations
vanish, and the class bias keeps every score near 0.01), so ``calibrated`` first runs a few
train-mode passes to give BatchNorm real statistics, then scales the class layers so that
hundreds of candidates pass the confidence threshold with distinct scores.
"""

from __future__ import annotations

import os

import torch
from torch import nn


class YoloWithNMS(nn.Module):
    """``non_max_suppression(model(images))``: a list of [n, 6] tensors (x1, y1, x2, y2, conf, cls)."""

    def __init__(self, model: nn.Module, conf: float = 0.25, iou: float = 0.45, max_det: int = 300) -> None:
        super().__init__()
        self.model, self.conf, self.iou, self.max_det = model, conf, iou, max_det

    def forward(self, images: torch.Tensor) -> list[torch.Tensor]:
        from ultralytics.utils.nms import non_max_suppression

        # Ultralytics' NMS stops after 2 s + 0.05 s an image and returns what it has so far: on a busy
        # CPU eager would then be cut short, and so would the reference lower() checks against.
        return non_max_suppression(self.model(images), self.conf, self.iou, max_det=self.max_det, max_time_img=60.0)


def build(
    config: str = "yolo11n.yaml", size: int = 320, class_scale: float = 0.15, class_bias: float = -0.8
) -> nn.Module:
    """The Ultralytics DetectionModel of ``config``, with calibrated random weights, in eval mode.

    Scores then spread over (0.25, 0.995) with 260-450 detections per 320 px image; a larger
    scale saturates many at exactly 1.0 (ties), and near-1 scores of overlapping boxes make the
    kept set hang on the last float bit."""
    os.environ.setdefault("YOLO_OFFLINE", "1")
    from ultralytics import YOLO

    torch.manual_seed(0)
    model = YOLO(config).model
    calibrate(model, size)
    head = model.model[-1]
    with torch.no_grad():
        for branch in head.cv3:
            last = branch[-1]
            last.weight.mul_(class_scale)
            last.bias.fill_(class_bias)
    return model.eval()


def calibrate(model: nn.Module, size: int, passes: int = 4) -> None:
    """BatchNorm statistics from a few train-mode passes over random images."""
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average over the passes
    generator = torch.Generator().manual_seed(0)
    model.train()
    with torch.no_grad():
        for _ in range(passes):
            model(torch.rand(2, 3, size, size, generator=generator))
    model.eval()


def images(count: int, seed: int, size: int = 320, contrast: float = 1.0) -> torch.Tensor:
    """Random images in [0.25, 0.75], the BatchNorm calibration's range, the first two with a flat
    patch: anchors that see only the patch compute the same class scores bit for bit, so those
    images hold exact score ties between NMS candidates. ``contrast`` > 1 on the first two drives
    many anchors' class scores to saturate at exactly 1.0: ties by the hundred."""
    x = torch.rand(count, 3, size, size, generator=torch.Generator().manual_seed(seed)) * 0.5 + 0.25
    flat = torch.tensor([0.4, 0.4, 0.7]).view(3, 1, 1)
    x[:1, :, size // 10 : size * 9 // 10, size // 10 : size // 2] = flat
    x[1:2, :, size // 10 : size // 2, size // 10 : size * 9 // 10] = flat
    x[:2] = (x[:2] - 0.5) * contrast + 0.5
    return x


def yolo11n() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """For ``fxdeploy lower examples/ultralytics_yolo.py:yolo11n``."""
    return YoloWithNMS(build("yolo11n.yaml")), (images(2, 0),)


def yolov8n() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return YoloWithNMS(build("yolov8n.yaml")), (images(2, 0),)
