"""A YOLOX-Pose-like detector (docs/deploying-a-model.md): per anchor a box, an objectness, a
person score and 17 keypoints (x, y, visibility), over two strides; per image the postprocess
YOLOX-Pose ships: score = objectness * class score, a threshold, ``batched_nms``, ``[:max_det]``,
and the keypoints gathered by the kept indices. Random weights, scaled so that each image keeps
dozens of people with distinct scores.
"""

from __future__ import annotations

import torch
from torch import nn

import fxdeploy

KEYPOINTS = 17


class PoseHead(nn.Module):
    """Two levels (strides 8 and 16), one 1x1 prediction per anchor: 4 box, 1 objectness, 1 class,
    17 x 3 keypoint values."""

    def __init__(self, width: int = 16, score_threshold: float = 0.7, iou_threshold: float = 0.65,
                 max_det: int = 100) -> None:
        super().__init__()
        self.score_threshold, self.iou_threshold, self.max_det = score_threshold, iou_threshold, max_det
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 2, 1), nn.ReLU(), nn.Conv2d(width, width, 3, 2, 1), nn.ReLU(),
                                  nn.Conv2d(width, width, 3, 2, 1), nn.ReLU())
        self.down = nn.Sequential(nn.Conv2d(width, width, 3, 2, 1), nn.ReLU())
        self.predict = nn.ModuleList(nn.Conv2d(width, 6 + 3 * KEYPOINTS, 1) for _ in range(2))
        self.strides = (8, 16)

    def forward(self, images: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        p8 = self.stem(images)
        boxes, scores, keypoints = [], [], []
        for feature, stride, predict in zip((p8, self.down(p8)), self.strides, self.predict, strict=True):
            raw = predict(feature).flatten(2).transpose(1, 2)  # [B, H*W, 57]
            h, w = feature.shape[2:]
            ys, xs = torch.meshgrid(torch.arange(h, dtype=raw.dtype), torch.arange(w, dtype=raw.dtype), indexing="ij")
            grid = torch.stack((xs, ys), -1).reshape(1, h * w, 2)
            centers = (grid + raw[..., :2]) * stride
            sizes = raw[..., 2:4].exp() * stride
            boxes.append(torch.cat((centers - sizes / 2, centers + sizes / 2), -1))
            scores.append(raw[..., 4].sigmoid() * raw[..., 5].sigmoid())
            points = raw[..., 6:].unflatten(-1, (KEYPOINTS, 3))
            keypoints.append(torch.cat(((points[..., :2] + grid[:, :, None]) * stride, points[..., 2:].sigmoid()), -1))
        return self.postprocess(torch.cat(boxes, 1), torch.cat(scores, 1), torch.cat(keypoints, 1))

    def postprocess(self, boxes: torch.Tensor, scores: torch.Tensor, keypoints: torch.Tensor) -> list[dict]:
        results = []
        for image in range(boxes.shape[0]):
            keep = scores[image] > self.score_threshold
            kept_boxes, kept_scores, kept_points = boxes[image][keep], scores[image][keep], keypoints[image][keep]
            labels = torch.zeros_like(kept_scores, dtype=torch.int64)  # one class: person
            kept = fxdeploy.ops.batched_nms(kept_boxes, kept_scores, labels, self.iou_threshold)[: self.max_det]
            results.append({"boxes": kept_boxes[kept], "scores": kept_scores[kept], "labels": labels[kept],
                            "keypoints": kept_points[kept]})
        return results


def images(batch: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(batch, 3, 128, 128, generator=torch.Generator().manual_seed(seed)) * 2 - 1


def pose() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The factory the CLI takes: ``fxdeploy lower examples/pose.py:pose``."""
    torch.manual_seed(0)
    model = PoseHead().eval()
    with torch.no_grad():
        p8 = model.stem(images(4, seed=100))
        for feature, predict in zip((p8, model.down(p8)), model.predict, strict=True):
            predict.bias[4:6].zero_()
            logits = predict(feature)[:, 4:6]  # objectness and class: mean 1, std 2, scores over (0, 1)
            predict.weight[4:6].mul_(2.0 / logits.std())
            predict.bias[4:6].fill_(1.0 - float(logits.mean() * 2.0 / logits.std()))
    return model, (images(2),)


def tensor_only_postprocess(self: PoseHead, boxes: torch.Tensor, scores: torch.Tensor,
                            keypoints: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """What you would write where a pass refuses the postprocess (docs/deploying-a-model.md, part 2):
    static, padded outputs from the one NMS op, keypoints gathered by the kept indices."""
    det_boxes, det_scores, det_labels, counts, index = fxdeploy.ops.multiclass_nms(
        boxes, scores.unsqueeze(-1), iou_threshold=self.iou_threshold, score_threshold=self.score_threshold,
        max_output_boxes_per_class=self.max_det, keep_top_k=self.max_det, output_index=True,
    )
    rows = index.clamp(min=0)  # padding rows hold -1; their keypoints are cut by the count anyway
    points = torch.gather(keypoints, 1, rows[..., None, None].expand(-1, -1, KEYPOINTS, 3))
    return det_boxes, det_scores, det_labels, counts, points


def unpack(outputs: tuple[torch.Tensor, ...]) -> list[dict[str, torch.Tensor]]:
    """The padded outputs, on the host, as eager's list of dicts: each image cut at its count."""
    boxes, scores, labels, counts, points = outputs
    return [{"boxes": boxes[i, :n], "scores": scores[i, :n], "labels": labels[i, :n], "keypoints": points[i, :n]}
            for i, n in enumerate(counts.tolist())]
