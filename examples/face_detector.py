"""kornia's FaceDetector (YuNet), a real library detector, deployed with one substitution.

``FaceDetector.postprocess`` loops over images, filters by score, sorts, runs kornia's Python
NMS and tests ``len(keep) > 0``: it cannot be captured. ``tensor_only_postprocess`` computes
the same detections with kornia's own decoding and ``fxdeploy.ops.multiclass_nms``; ``unpack``
returns the same list of per-image ``(N, 15)`` tensors. Weights are random: nothing downloads.
"""

from __future__ import annotations

import unittest.mock

import torch

import fxdeploy
from fxdeploy import Substitution

_MIN_SIZES = [[10, 16, 24], [32, 48], [64, 96], [128, 192, 256]]
_STEPS = [8, 16, 32, 64]


def _face_detector_class() -> type:
    from kornia.contrib import FaceDetector

    return FaceDetector


def build(keep_top_k: int = 100, confidence_threshold: float = 0.33) -> torch.nn.Module:
    """FaceDetector with YuNet built from its config, random weights (its constructor downloads)."""
    from kornia.contrib import face_detection
    from kornia.models.yunet import YuNet

    with unittest.mock.patch.object(face_detection, "YuNet", lambda phase, pretrained: YuNet(phase, False)):
        return face_detection.FaceDetector(
            top_k=5000, confidence_threshold=confidence_threshold, nms_threshold=0.3, keep_top_k=keep_top_k
        ).eval()


def tensor_only_postprocess(
    self: torch.nn.Module, data: dict[str, torch.Tensor], height: int, width: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded detections [B, keep_top_k, 15] and counts [B]: FaceDetector.postprocess, batched."""
    from kornia.models.yunet.processors import PriorBox, decode

    loc, conf, iou = data["loc"], data["conf"], data["iou"]
    batch, priors_count = loc.shape[0], loc.shape[1]
    priors = PriorBox(self.min_sizes, self.steps, self.clip, image_size=(height, width)).to(loc.device, loc.dtype)()
    scale = torch.tensor([width, height] * 7, dtype=loc.dtype)
    boxes = decode(loc.reshape(-1, 14), priors.repeat(batch, 1), self.variance).reshape(batch, priors_count, 14)
    boxes = boxes * scale
    scores = (conf[..., 1] * iou[..., 0].clamp(0.0, 1.0)).sqrt()
    _, det_scores, _, counts, index = fxdeploy.ops.multiclass_nms(
        boxes[..., :4], scores.unsqueeze(-1), iou_threshold=self.nms_threshold,
        score_threshold=self.confidence_threshold, pre_top_k=self.top_k,
        max_output_boxes_per_class=self.keep_top_k, keep_top_k=self.keep_top_k, output_index=True,
    )
    picked = torch.gather(boxes, 1, index.clamp(min=0).unsqueeze(-1).expand(-1, -1, 14))
    dets = torch.cat((picked, det_scores.unsqueeze(-1)), -1)
    return torch.where((index >= 0).unsqueeze(-1), dets, torch.zeros_like(dets)), counts


def unpack(outputs: tuple[torch.Tensor, torch.Tensor]) -> list[torch.Tensor]:
    dets, counts = outputs
    return [dets[i, :n] for i, n in enumerate(counts.tolist())]


def substitutions() -> dict[object, Substitution]:
    detector = _face_detector_class()
    return {detector.postprocess: Substitution(detector.postprocess, tensor_only_postprocess, unpack=unpack)}


def kornia_yunet() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return build(), (torch.rand(2, 3, 160, 160) * 255,)
