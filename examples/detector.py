"""A YOLO-style single-stage detector whose postprocessing is written the way real code is.

``TinyYolo.postprocess`` loops over images, filters by score with a boolean mask, runs
``batched_nms`` (torchvision's where installed), slices ``[:max_det]`` and returns a list of
per-image dicts: everything torch.export cannot capture with a dynamic batch. fxdeploy deploys
it as it is, with no substitution: capture takes one image (the loop fixes the batch), the
padding pass makes the boolean mask, the NMS and ``[:max_det]`` static, and ``Deployed`` runs a
batch image by image and returns the same list of dicts.
"""

from __future__ import annotations

import torch
from torch import nn

try:  # real detection code calls torchvision; fxdeploy's op has the same semantics
    from torchvision.ops import batched_nms
except Exception:  # noqa: BLE001 - no torchvision (or a CUDA-only build) here
    from fxdeploy.ops import batched_nms


def _conv(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.SiLU())


class TinyYolo(nn.Module):
    """Anchor-free head (distances to box sides per grid cell) over two strides, sigmoid scores."""

    def __init__(
        self, num_classes: int = 6, width: int = 16, conf_threshold: float = 0.25,
        iou_threshold: float = 0.45, max_det: int = 50,
    ) -> None:
        super().__init__()
        self.num_classes, self.max_det = num_classes, max_det
        self.conf_threshold, self.iou_threshold = conf_threshold, iou_threshold
        self.stem = nn.Sequential(_conv(3, width, 2), _conv(width, width, 2), _conv(width, width * 2, 2))
        self.down = _conv(width * 2, width * 2, 2)
        self.strides = (8, 16)
        self.box_head = nn.ModuleList(nn.Conv2d(width * 2, 4, 1) for _ in self.strides)
        self.cls_head = nn.ModuleList(nn.Conv2d(width * 2, num_classes, 1) for _ in self.strides)

    def decode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Boxes [B, N, 4] (x1, y1, x2, y2 in pixels) and class scores [B, N, C]."""
        p8 = self.stem((x / 255.0 - 0.5) / 0.25)
        feats = (p8, self.down(p8))
        all_boxes, all_scores = [], []
        for feat, stride, box_head, cls_head in zip(feats, self.strides, self.box_head, self.cls_head, strict=True):
            b, _, h, w = feat.shape
            ys = (torch.arange(h, dtype=x.dtype) + 0.5) * stride
            xs = (torch.arange(w, dtype=x.dtype) + 0.5) * stride
            cy, cx = torch.meshgrid(ys, xs, indexing="ij")
            centers = torch.stack((cx, cy, cx, cy), -1).reshape(1, h * w, 4)
            dist = torch.nn.functional.softplus(box_head(feat)).permute(0, 2, 3, 1).reshape(b, h * w, 4) * stride * 2
            sign = torch.tensor([-1.0, -1.0, 1.0, 1.0], dtype=x.dtype)
            all_boxes.append(centers + dist * sign)
            all_scores.append(cls_head(feat).sigmoid().permute(0, 2, 3, 1).reshape(b, h * w, self.num_classes))
        return torch.cat(all_boxes, 1), torch.cat(all_scores, 1)

    def postprocess(self, boxes: torch.Tensor, scores: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        results = []
        for image in range(boxes.shape[0]):
            conf, labels = scores[image].max(-1)
            keep = conf > self.conf_threshold
            b, s, c = boxes[image][keep], conf[keep], labels[keep]
            kept = batched_nms(b, s, c, self.iou_threshold)[: self.max_det]
            results.append({"boxes": b[kept], "scores": s[kept], "labels": c[kept]})
        return results

    def forward(self, images: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        return self.postprocess(*self.decode(images))


def tiny_yolo() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = TinyYolo().eval()
    with torch.no_grad():  # bias the class logits so random weights give a realistic candidate count
        for head in model.cls_head:
            head.weight.normal_(0.0, 8.0)
            head.bias.fill_(-4.0)
    return model, (torch.rand(2, 3, 128, 128) * 255,)
