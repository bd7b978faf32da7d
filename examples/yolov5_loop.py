"""A YOLOv5-style detector whose ``non_max_suppression`` is the classic per-image loop.

It keeps the loop's idioms as YOLOv5 writes them: the objectness filter ``x[xc[xi]]``, the in-place
``xywh2xyxy`` on a clone, the best class by ``max``, a second filter by confidence,
``if not n: continue``, the unconditional pre-sort ``x[x[:, 4].argsort(descending=True)[:max_nms]]``,
class offsets, ``nms`` and ``i[:max_det]``. It calls fxdeploy's ``nms`` (torchvision's semantics)
so that it runs without torchvision. fxdeploy lowers it with no substitution.
"""

from __future__ import annotations

import torch
from torch import nn

from fxdeploy.ops import nms


def xywh2xyxy(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[:, 0] = x[:, 0] - x[:, 2] / 2
    y[:, 1] = x[:, 1] - x[:, 3] / 2
    y[:, 2] = x[:, 0] + x[:, 2] / 2
    y[:, 3] = x[:, 1] + x[:, 3] / 2
    return y


def non_max_suppression(
    prediction: torch.Tensor, conf_thres: float = 0.25, iou_thres: float = 0.45, max_det: int = 100,
    max_nms: int = 120, max_wh: int = 7680,
) -> list[torch.Tensor]:
    """[B, N, 5 + classes] (cx, cy, w, h, objectness, class scores) -> per image [n, 6] (xyxy, conf, class)."""
    xc = prediction[..., 4] > conf_thres
    output = [torch.zeros((0, 6), device=prediction.device)] * prediction.shape[0]
    for xi, x in enumerate(prediction):
        x = x[xc[xi]]
        if not x.shape[0]:
            continue
        x = torch.cat((x[:, :5], x[:, 5:] * x[:, 4:5]), 1)  # conf = obj_conf * cls_conf
        box = xywh2xyxy(x[:, :4])
        conf, j = x[:, 5:].max(1, keepdim=True)
        x = torch.cat((box, conf, j.float()), 1)[conf.view(-1) > conf_thres]
        n = x.shape[0]
        if not n:
            continue
        x = x[x[:, 4].argsort(descending=True)[:max_nms]]  # sort by confidence, drop the excess
        c = x[:, 5:6] * max_wh
        boxes, scores = x[:, :4] + c, x[:, 4]
        i = nms(boxes, scores, iou_thres)
        i = i[:max_det]
        output[xi] = x[i]
    return output


class YoloV5Loop(nn.Module):
    """Three strided convolutions, one anchor per cell at two strides, YOLOv5's head decoding."""

    def __init__(self, num_classes: int = 3, width: int = 16, max_nms: int = 120, max_det: int = 300) -> None:
        super().__init__()
        self.num_classes, self.max_nms, self.max_det = num_classes, max_nms, max_det
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, 2, 1), nn.SiLU(), nn.Conv2d(width, width, 3, 2, 1), nn.SiLU(),
            nn.Conv2d(width, width, 3, 2, 1), nn.SiLU(),
        )
        self.down = nn.Sequential(nn.Conv2d(width, width, 3, 2, 1), nn.SiLU())
        self.heads = nn.ModuleList(nn.Conv2d(width, 5 + num_classes, 1) for _ in range(2))
        self.strides = (8, 16)

    def decode(self, images: torch.Tensor) -> torch.Tensor:
        """[B, N, 5 + classes]: boxes (cx, cy, w, h) in pixels, objectness, class scores."""
        p8 = self.stem(images)
        levels = []
        for feat, stride, head in zip((p8, self.down(p8)), self.strides, self.heads, strict=True):
            b, _, h, w = feat.shape
            out = head(feat).sigmoid().permute(0, 2, 3, 1).reshape(b, h * w, 5 + self.num_classes)
            ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
            grid = torch.stack((xs, ys), -1).reshape(1, h * w, 2).to(out.dtype)
            xy = (out[..., :2] * 2 - 0.5 + grid) * stride
            wh = (out[..., 2:4] * 2) ** 2 * stride * 4
            levels.append(torch.cat((xy, wh, out[..., 4:]), -1))
        return torch.cat(levels, 1)

    def forward(self, images: torch.Tensor) -> list[torch.Tensor]:
        return non_max_suppression(self.decode(images), max_nms=self.max_nms, max_det=self.max_det)


def yolov5_loop() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Random weights; objectness biased so that more rows pass the filters than ``max_nms`` keeps."""
    torch.manual_seed(0)
    model = YoloV5Loop().eval()
    with torch.no_grad():
        for head in model.heads:
            head.weight.normal_(0.0, 0.3)
            head.bias[4].fill_(0.5)
    return model, (torch.rand(2, 3, 128, 128),)
