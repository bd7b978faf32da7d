"""Detectors and decoders written the way their users write them: plain PyTorch, Python loops over
the images, boolean-mask filters, ``min(n, k)`` top-k, per-class and per-level loops, in-place
writes into clones, and NMS from torchvision (fxdeploy's torchvision-free op with the same
semantics where torchvision is not installed). Nothing here knows about fxdeploy: no substitution,
no padded outputs. tests/e2e/test_user_idioms.py lowers each to every target with the default
settings and checks it against eager.

Each factory returns ``(model, (images,))``, the CLI's convention. Weights are random, with the
final layers scaled (``_standardize``) so that tens of detections survive per image with spread
scores; ``images`` repeats a 32 px patch over a quadrant of the first two images, so equal
features give exactly equal scores at different boxes.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

try:  # what users call; fxdeploy's ops have torchvision.ops' semantics where it is absent
    from torchvision.ops import batched_nms, nms
except Exception:  # noqa: BLE001 - no torchvision (or a CUDA-only build) here
    from fxdeploy.ops import batched_nms, nms

SIZE = 128


def images(count: int, seed: int) -> torch.Tensor:
    """Random images in [0, 1]; the first two repeat a 32 px patch over their top-left quadrant."""
    x = torch.rand(count, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(seed))
    for i in range(min(2, count)):
        x[i, :, :64, :64] = x[i, :, :32, :32].repeat(1, 2, 2)
    return x


def _stem(widths: tuple[int, ...]) -> nn.Sequential:
    """Stride-2 3x3 convs with ReLU, one per step of ``widths`` (3 -> widths[0] -> ...)."""
    layers: list[nn.Module] = []
    for cin, cout in zip((3, *widths[:-1]), widths, strict=True):
        layers += [nn.Conv2d(cin, cout, 3, 2, 1), nn.ReLU()]
    return nn.Sequential(*layers)


@torch.no_grad()
def _standardize(layer: nn.Conv2d | nn.Linear, inputs: torch.Tensor, rows: slice, mean: float, std: float) -> None:
    """Scale each of ``layer``'s output rows so that, on ``inputs``, it has this mean and std over
    images and positions: random weights otherwise give scores that all sit near 0.5, or one class
    above the threshold everywhere."""
    out = layer(inputs)
    out = out.transpose(1, -1) if isinstance(layer, nn.Conv2d) else out
    out = out.reshape(-1, out.shape[-1])[:, rows]
    scale = std / out.std(0)
    layer.weight[rows] *= scale.view(-1, *[1] * (layer.weight.dim() - 1))
    layer.bias[rows] = layer.bias[rows] * scale + (mean - scale * out.mean(0))


def _calibration_images() -> torch.Tensor:
    return images(4, seed=100)


# 1. YOLOv5: Detect's grid decode, then utils/general.py's non_max_suppression loop.

def xywh2xyxy(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[:, 0] = x[:, 0] - x[:, 2] / 2
    y[:, 1] = x[:, 1] - x[:, 3] / 2
    y[:, 2] = x[:, 0] + x[:, 2] / 2
    y[:, 3] = x[:, 1] + x[:, 3] / 2
    return y


def yolov5_nms(prediction: torch.Tensor, conf_thres: float = 0.25, iou_thres: float = 0.45,
               max_det: int = 300) -> list[torch.Tensor]:
    max_wh, max_nms = 7680, 30000
    xc = prediction[..., 4] > conf_thres
    output = [torch.zeros((0, 6))] * prediction.shape[0]
    for xi, x in enumerate(prediction):
        x = x[xc[xi]]
        x[:, 5:] *= x[:, 4:5]  # conf = obj_conf * cls_conf
        box = xywh2xyxy(x[:, :4])
        conf, j = x[:, 5:].max(1, keepdim=True)
        x = torch.cat((box, conf, j.float()), 1)[conf.view(-1) > conf_thres]
        x = x[x[:, 4].argsort(descending=True)[:max_nms]]
        c = x[:, 5:6] * max_wh  # classes
        boxes, scores = x[:, :4] + c, x[:, 4]
        i = nms(boxes, scores, iou_thres)
        i = i[:max_det]
        output[xi] = x[i]
    return output


class YoloV5(nn.Module):
    """Three anchors per cell at strides 8 and 16; ``[B, N, 5 + nc]`` of xywh, objectness, classes."""

    def __init__(self, nc: int = 4, width: int = 16) -> None:
        super().__init__()
        self.nc, self.na, self.strides = nc, 3, (8, 16)
        self.stem = _stem((width, width, 2 * width))
        self.down = nn.Sequential(nn.Conv2d(2 * width, 2 * width, 3, 2, 1), nn.ReLU())
        self.m = nn.ModuleList(nn.Conv2d(2 * width, self.na * (5 + nc), 1) for _ in self.strides)
        self.register_buffer("anchors", torch.tensor([[[10, 13], [16, 30], [33, 23]], [[30, 61], [62, 45], [59, 119]]],
                                                     dtype=torch.float32))

    def features(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p3 = self.stem(images)
        return p3, self.down(p3)

    def forward(self, images: torch.Tensor) -> list[torch.Tensor]:
        z = []
        for i, feat in enumerate(self.features(images)):
            bs, _, ny, nx = feat.shape
            x = self.m[i](feat).view(bs, self.na, 5 + self.nc, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
            yv, xv = torch.meshgrid(torch.arange(ny, dtype=x.dtype), torch.arange(nx, dtype=x.dtype), indexing="ij")
            grid = torch.stack((xv, yv), 2).expand(1, self.na, ny, nx, 2) - 0.5
            anchor_grid = self.anchors[i].view(1, self.na, 1, 1, 2).expand(1, self.na, ny, nx, 2)
            xy, wh, conf = x.sigmoid().split((2, 2, self.nc + 1), 4)
            xy = (xy * 2 + grid) * self.strides[i]
            wh = (wh * 2) ** 2 * anchor_grid
            z.append(torch.cat((xy, wh, conf), 4).view(bs, self.na * nx * ny, 5 + self.nc))
        return yolov5_nms(torch.cat(z, 1), conf_thres=0.25, iou_thres=0.45, max_det=300)


def yolov5() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = YoloV5().eval()
    for m, feat in zip(model.m, model.features(_calibration_images()), strict=True):
        for a in range(model.na):  # objectness and class logits of each anchor
            _standardize(m, feat, slice(a * 9 + 4, a * 9 + 9), -2.0, 2.0)
    return model, (images(2, 0),)


# 2. CenterNet: heatmap peaks by a 3x3 max-pool, top-k over classes x positions, gathered sizes.

class CenterNet(nn.Module):
    def __init__(self, num_classes: int = 3, width: int = 16, k: int = 100, threshold: float = 0.3) -> None:
        super().__init__()
        self.k, self.threshold, self.down_ratio = k, threshold, 4
        self.stem = _stem((width, 2 * width))
        self.hm = nn.Conv2d(2 * width, num_classes, 1)
        self.wh = nn.Conv2d(2 * width, 2, 1)
        self.reg = nn.Conv2d(2 * width, 2, 1)

    def forward(self, images: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        feat = self.stem(images)
        heat = self.hm(feat).sigmoid()
        wh, reg = self.wh(feat).exp() * 4, self.reg(feat).sigmoid()
        batch, cat, height, width = heat.shape
        hmax = F.max_pool2d(heat, 3, stride=1, padding=1)
        heat = heat * (hmax == heat).float()
        scores, inds = torch.topk(heat.view(batch, -1), self.k)
        clses = inds // (height * width)
        inds = inds % (height * width)
        ys = (inds // width).float()
        xs = (inds % width).float()
        reg = reg.view(batch, 2, -1).gather(2, inds.unsqueeze(1).expand(batch, 2, self.k))
        wh = wh.view(batch, 2, -1).gather(2, inds.unsqueeze(1).expand(batch, 2, self.k))
        xs, ys = xs + reg[:, 0], ys + reg[:, 1]
        bboxes = torch.stack([xs - wh[:, 0] / 2, ys - wh[:, 1] / 2, xs + wh[:, 0] / 2, ys + wh[:, 1] / 2], -1)
        bboxes = bboxes * self.down_ratio
        results = []
        for i in range(batch):
            keep = scores[i] > self.threshold
            results.append({"boxes": bboxes[i][keep], "scores": scores[i][keep], "labels": clses[i][keep]})
        return results


def centernet() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = CenterNet().eval()
    _standardize(model.hm, model.stem(_calibration_images()), slice(None), -4.0, 1.5)
    return model, (images(2, 0),)


# 3. DETR: one prediction per query (here one per cell of a stride-8 map, Deformable-DETR's
#    reference points), PostProcess's softmax without the no-object class, then a threshold.

def box_cxcywh_to_xyxy(x: torch.Tensor) -> torch.Tensor:
    x_c, y_c, w, h = x.unbind(-1)
    b = [(x_c - 0.5 * w), (y_c - 0.5 * h), (x_c + 0.5 * w), (y_c + 0.5 * h)]
    return torch.stack(b, dim=-1)


def inverse_sigmoid(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    x = x.clamp(min=0, max=1)
    return torch.log(x.clamp(min=eps) / (1 - x).clamp(min=eps))


class Detr(nn.Module):
    def __init__(self, num_classes: int = 5, width: int = 32, threshold: float = 0.5) -> None:
        super().__init__()
        self.threshold = threshold
        self.stem = _stem((16, 32, width))
        self.class_embed = nn.Linear(width, num_classes + 1)
        self.bbox_embed = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 4))

    def queries(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        feat = self.stem(images)
        h, w = feat.shape[-2:]
        ys, xs = torch.meshgrid((torch.arange(h) + 0.5) / h, (torch.arange(w) + 0.5) / w, indexing="ij")
        reference = torch.stack((xs, ys, torch.full_like(xs, 0.15), torch.full_like(ys, 0.15)), -1).view(1, h * w, 4)
        return feat.flatten(2).transpose(1, 2), reference

    def forward(self, images: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        hs, reference = self.queries(images)
        out_logits = self.class_embed(hs)
        out_bbox = (self.bbox_embed(hs) + inverse_sigmoid(reference)).sigmoid()
        prob = F.softmax(out_logits, -1)
        scores, labels = prob[..., :-1].max(-1)
        boxes = box_cxcywh_to_xyxy(out_bbox)
        img_h, img_w = images.shape[-2:]
        boxes = boxes * torch.tensor([img_w, img_h, img_w, img_h], dtype=boxes.dtype)
        results = []
        for s, lab, b in zip(scores, labels, boxes, strict=True):
            keep = s > self.threshold
            results.append({"scores": s[keep], "labels": lab[keep], "boxes": b[keep]})
        return results


def detr() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = Detr().eval()
    hs, _ = model.queries(_calibration_images())
    _standardize(model.class_embed, hs, slice(None), 0.0, 3.0)
    with torch.no_grad():
        model.class_embed.bias[-1] += 3.0  # the no-object class wins on most queries, as in a trained DETR
        model.bbox_embed[2].weight.mul_(0.2)
    return model, (images(2, 0),)


# 4. FCOS (detectron2's dense-detector inference): per level sqrt(cls * centerness), a score
#    filter, top-k of min(n, k), boxes of the kept anchors; levels concatenated; batched NMS.

class Fcos(nn.Module):
    def __init__(self, num_classes: int = 4, width: int = 16, score_thresh: float = 0.8,
                 topk_candidates: int = 50, nms_thresh: float = 0.6, max_det: int = 100) -> None:
        super().__init__()
        self.num_classes, self.strides = num_classes, (8, 16)
        self.score_thresh, self.topk_candidates = score_thresh, topk_candidates
        self.nms_thresh, self.max_det = nms_thresh, max_det
        self.stem = _stem((width, width, 2 * width))
        self.down = nn.Sequential(nn.Conv2d(2 * width, 2 * width, 3, 2, 1), nn.ReLU())
        self.cls_score = nn.Conv2d(2 * width, num_classes, 1)
        self.bbox_pred = nn.Conv2d(2 * width, 4, 1)
        self.centerness = nn.Conv2d(2 * width, 1, 1)

    def features(self, images: torch.Tensor) -> list[torch.Tensor]:
        p3 = self.stem(images)
        return [p3, self.down(p3)]

    def forward(self, images: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        feats = self.features(images)
        cls = [self.cls_score(f).flatten(2).transpose(1, 2) for f in feats]  # [B, HW, C]
        ctr = [self.centerness(f).flatten(2).transpose(1, 2) for f in feats]  # [B, HW, 1]
        reg = [F.relu(self.bbox_pred(f)).flatten(2).transpose(1, 2) * s
               for f, s in zip(feats, self.strides, strict=True)]
        anchors = []
        for f, stride in zip(feats, self.strides, strict=True):
            h, w = f.shape[-2:]
            ys, xs = torch.meshgrid(torch.arange(h) * stride + stride // 2, torch.arange(w) * stride + stride // 2,
                                    indexing="ij")
            anchors.append(torch.stack((xs, ys), -1).view(-1, 2).float())
        results = []
        for img in range(images.shape[0]):
            boxes_all, scores_all, classes_all = [], [], []
            for level in range(len(feats)):
                box, score, label = self.decode_level(anchors[level], cls[level][img], ctr[level][img],
                                                      reg[level][img])
                boxes_all.append(box)
                scores_all.append(score)
                classes_all.append(label)
            boxes, scores, classes = torch.cat(boxes_all), torch.cat(scores_all), torch.cat(classes_all)
            keep = batched_nms(boxes, scores, classes, self.nms_thresh)
            keep = keep[: self.max_det]
            results.append({"boxes": boxes[keep], "scores": scores[keep], "labels": classes[keep]})
        return results

    def decode_level(self, anchors: torch.Tensor, cls: torch.Tensor, ctr: torch.Tensor,
                     reg: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        pred_scores = torch.sqrt(cls.sigmoid() * ctr.sigmoid())  # [HW, C]
        keep_idxs = pred_scores > self.score_thresh
        pred_scores = pred_scores[keep_idxs]
        topk_idxs = torch.nonzero(keep_idxs)  # [n, 2]: anchor, class
        num_topk = min(topk_idxs.size(0), self.topk_candidates)
        pred_scores, idxs = pred_scores.topk(num_topk)
        topk_idxs = topk_idxs[idxs]
        anchor_idxs, classes_idxs = topk_idxs.unbind(dim=1)
        points, dist = anchors[anchor_idxs], reg[anchor_idxs]
        boxes = torch.cat((points - dist[:, :2], points + dist[:, 2:]), 1)
        return boxes, pred_scores, classes_idxs


def fcos() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = Fcos().eval()
    p3 = model.features(_calibration_images())[0]  # the head is shared by the levels
    _standardize(model.cls_score, p3, slice(None), -1.0, 2.0)
    _standardize(model.centerness, p3, slice(None), 0.5, 1.5)
    with torch.no_grad():
        model.bbox_pred.bias.fill_(2.0)
    return model, (images(2, 0),)


# 5./7. Ultralytics YOLOv8 layout [B, 4 + nc + extra, N]: non_max_suppression writes xyxy into a
#    transposed view, filters, keeps the extra columns (mask coefficients, keypoints) beside each row.

def yolov8_nms(prediction: torch.Tensor, nc: int, conf_thres: float = 0.25, iou_thres: float = 0.45,
               max_det: int = 300) -> list[torch.Tensor]:
    bs = prediction.shape[0]
    nm = prediction.shape[1] - nc - 4
    mi = 4 + nc
    xc = prediction[:, 4:mi].amax(1) > conf_thres
    prediction = prediction.transpose(-1, -2)
    prediction[..., :4] = xywh2xyxy(prediction[..., :4].reshape(-1, 4)).view(bs, -1, 4)
    output = [torch.zeros((0, 6 + nm))] * bs
    for xi, x in enumerate(prediction):
        x = x[xc[xi]]
        box, cls, mask = x.split((4, nc, nm), 1)
        conf, j = cls.max(1, keepdim=True)
        x = torch.cat((box, conf, j.float(), mask), 1)[conf.view(-1) > conf_thres]
        c = x[:, 5:6] * 7680
        i = nms(x[:, :4] + c, x[:, 4], iou_thres)
        i = i[:max_det]
        output[xi] = x[i]
    return output


class _AnchorFreeHead(nn.Module):
    """Stride-8 cells; per cell distances to the box sides (ltrb), class logits and ``extra`` values."""

    def __init__(self, nc: int, extra: int, width: int = 16) -> None:
        super().__init__()
        self.nc, self.stride = nc, 8
        self.stem4 = _stem((width, 2 * width))
        self.stem8 = nn.Sequential(nn.Conv2d(2 * width, 2 * width, 3, 2, 1), nn.ReLU())
        self.box = nn.Conv2d(2 * width, 4, 1)
        self.cls = nn.Conv2d(2 * width, nc, 1)
        self.extra = nn.Conv2d(2 * width, extra, 1)

    def predict(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, 4 + nc + extra, N] (xywh in pixels, class scores, raw extras) and the stride-4 feature."""
        p2 = self.stem4(images)
        p3 = self.stem8(p2)
        h, w = p3.shape[-2:]
        ys, xs = torch.meshgrid(torch.arange(h) + 0.5, torch.arange(w) + 0.5, indexing="ij")
        anchors = torch.stack((xs, ys)).view(1, 2, -1)
        lt, rb = (F.softplus(self.box(p3)).flatten(2) * 2).chunk(2, 1)
        x1y1, x2y2 = anchors - lt, anchors + rb
        dbox = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * self.stride
        return torch.cat((dbox, self.cls(p3).flatten(2).sigmoid(), self.extra(p3).flatten(2)), 1), p2


def crop_mask(masks: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    _, h, w = masks.shape
    x1, y1, x2, y2 = torch.chunk(boxes[:, :, None], 4, 1)
    r = torch.arange(w, dtype=x1.dtype)[None, None, :]
    c = torch.arange(h, dtype=x1.dtype)[None, :, None]
    return masks * ((r >= x1) * (r < x2) * (c >= y1) * (c < y2))


class YoloSeg(_AnchorFreeHead):
    """YOLOv8-seg: 8 mask coefficients per row, prototypes from the stride-4 feature."""

    def __init__(self, nc: int = 3, nm: int = 8) -> None:
        super().__init__(nc, nm)
        self.proto = nn.Conv2d(self.cls.in_channels, nm, 1)

    def forward(self, images: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        preds, p2 = self.predict(images)
        protos = self.proto(p2)
        ih, iw = images.shape[-2:]
        results = []
        for i, pred in enumerate(yolov8_nms(preds, self.nc, conf_thres=0.5, iou_thres=0.5, max_det=100)):
            c, mh, mw = protos[i].shape
            masks = (pred[:, 6:] @ protos[i].float().view(c, -1)).sigmoid().view(-1, mh, mw)
            downsampled = pred[:, :4] * torch.tensor([mw / iw, mh / ih, mw / iw, mh / ih])
            masks = crop_mask(masks, downsampled) > 0.5
            results.append({"boxes": pred[:, :4], "scores": pred[:, 4], "labels": pred[:, 5].long(),
                            "masks": masks})
        return results


def yolo_seg() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = YoloSeg().eval()
    p3 = model.stem8(model.stem4(_calibration_images()))
    _standardize(model.cls, p3, slice(None), -2.7, 2.0)
    _standardize(model.extra, p3, slice(None), 0.0, 1.0)
    return model, (images(2, 0),)


class YoloPose(_AnchorFreeHead):
    """YOLOv8-pose: one class (person) and 17 keypoints (x, y, visibility) per row."""

    def __init__(self) -> None:
        super().__init__(1, 17 * 3)

    def forward(self, images: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        preds, _ = self.predict(images)
        b, _, n = preds.shape
        h, w = images.shape[-2] // self.stride, images.shape[-1] // self.stride
        ys, xs = torch.meshgrid(torch.arange(h) + 0.5, torch.arange(w) + 0.5, indexing="ij")
        anchors = torch.stack((xs, ys)).view(1, 1, 2, -1)
        kpts = preds[:, 5:].view(b, 17, 3, n)
        kpts = torch.cat(((kpts[:, :, :2] * 2 + anchors) * self.stride, kpts[:, :, 2:].sigmoid()), 2)
        preds = torch.cat((preds[:, :5], kpts.view(b, 51, n)), 1)
        results = []
        for pred in yolov8_nms(preds, 1, conf_thres=0.5, iou_thres=0.6, max_det=100):
            pred_kpts = pred[:, 6:].view(len(pred), 17, 3)
            results.append({"boxes": pred[:, :4], "scores": pred[:, 4], "labels": pred[:, 5].long(),
                            "keypoints": pred_kpts})
        return results


def yolo_pose() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = YoloPose().eval()
    p3 = model.stem8(model.stem4(_calibration_images()))
    _standardize(model.cls, p3, slice(None), -1.5, 2.0)
    _standardize(model.extra, p3, slice(None), 0.0, 1.0)
    return model, (images(2, 0),)


# 6. Ultralytics OBB: rotated boxes (xywh, angle), a probiou matrix and fast NMS (triu, column max).

def _get_covariance_matrix(boxes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gbbs = torch.cat((boxes[:, 2:4].pow(2) / 12, boxes[:, 4:]), dim=-1)
    a, b, c = gbbs.split(1, dim=-1)
    cos, sin = c.cos(), c.sin()
    cos2, sin2 = cos.pow(2), sin.pow(2)
    return a * cos2 + b * sin2, a * sin2 + b * cos2, (a - b) * cos * sin


def batch_probiou(obb1: torch.Tensor, obb2: torch.Tensor, eps: float = 1e-7) -> torch.Tensor:
    x1, y1 = obb1[..., :2].split(1, dim=-1)
    x2, y2 = (x.squeeze(-1)[None] for x in obb2[..., :2].split(1, dim=-1))
    a1, b1, c1 = _get_covariance_matrix(obb1)
    a2, b2, c2 = (x.squeeze(-1)[None] for x in _get_covariance_matrix(obb2))
    t1 = (((a1 + a2) * (y1 - y2).pow(2) + (b1 + b2) * (x1 - x2).pow(2)) /
          ((a1 + a2) * (b1 + b2) - (c1 + c2).pow(2) + eps)) * 0.25
    t2 = (((c1 + c2) * (x2 - x1) * (y1 - y2)) / ((a1 + a2) * (b1 + b2) - (c1 + c2).pow(2) + eps)) * 0.5
    t3 = (((a1 + a2) * (b1 + b2) - (c1 + c2).pow(2)) /
          (4 * ((a1 * b1 - c1.pow(2)).clamp_(0) * (a2 * b2 - c2.pow(2)).clamp_(0)).sqrt() + eps) + eps).log() * 0.5
    bd = (t1 + t2 + t3).clamp(eps, 100.0)
    hd = (1.0 - (-bd).exp() + eps).sqrt()
    return 1 - hd


def nms_rotated(boxes: torch.Tensor, scores: torch.Tensor, threshold: float = 0.45) -> torch.Tensor:
    sorted_idx = torch.argsort(scores, descending=True)
    boxes = boxes[sorted_idx]
    ious = batch_probiou(boxes, boxes).triu_(diagonal=1)
    pick = torch.nonzero(ious.max(dim=0)[0] < threshold).squeeze_(-1)
    return sorted_idx[pick]


class YoloObb(_AnchorFreeHead):
    """YOLOv8-obb: one angle per row, (sigmoid - 0.25) * pi."""

    def __init__(self, nc: int = 3) -> None:
        super().__init__(nc, 1)

    def forward(self, images: torch.Tensor) -> list[torch.Tensor]:
        preds, _ = self.predict(images)
        angle = (preds[:, -1:].sigmoid() - 0.25) * math.pi
        prediction = torch.cat((preds[:, :-1], angle), 1).transpose(-1, -2)  # [B, N, 4 + nc + 1]
        output = []
        for x in prediction:
            x = x[x[:, 4:4 + self.nc].amax(1) > 0.5]
            box, cls, ang = x.split((4, self.nc, 1), 1)
            conf, j = cls.max(1, keepdim=True)
            x = torch.cat((box, conf, j.float(), ang), 1)
            c = x[:, 5:6] * 7680
            boxes = torch.cat((x[:, :2] + c, x[:, 2:4], x[:, -1:]), dim=-1)
            i = nms_rotated(boxes, x[:, 4], 0.45)
            output.append(x[i[:100]])
        return output


def yolo_obb() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = YoloObb().eval()
    p3 = model.stem8(model.stem4(_calibration_images()))
    _standardize(model.cls, p3, slice(None), -2.0, 2.0)
    _standardize(model.extra, p3, slice(None), 0.0, 2.0)
    return model, (images(2, 0),)


# 8. A user's own NMS: a Python while loop over the remaining order. No padded form can equal it,
#    so fxdeploy must refuse it and say what to write instead.

def python_nms(boxes: torch.Tensor, scores: torch.Tensor, thr: float) -> torch.Tensor:
    x1, y1, x2, y2 = boxes.unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    order = scores.argsort(descending=True)
    keep = []
    while order.numel() > 0:
        i = order[0]
        keep.append(i)
        xx1 = x1[order[1:]].clamp(min=float(x1[i]))
        yy1 = y1[order[1:]].clamp(min=float(y1[i]))
        xx2 = x2[order[1:]].clamp(max=float(x2[i]))
        yy2 = y2[order[1:]].clamp(max=float(y2[i]))
        inter = (xx2 - xx1).clamp(min=0) * (yy2 - yy1).clamp(min=0)
        iou = inter / (areas[i] + areas[order[1:]] - inter)
        order = order[1:][iou <= thr]
    return torch.stack(keep) if keep else torch.zeros(0, dtype=torch.long)


class WhileLoopNms(_AnchorFreeHead):
    def __init__(self) -> None:
        super().__init__(1, 1)

    def forward(self, images: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        preds, _ = self.predict(images)
        results = []
        for pred in preds.transpose(1, 2):
            pred = pred[pred[:, 4] > 0.5]
            boxes = torch.cat((pred[:, :2] - pred[:, 2:4] / 2, pred[:, :2] + pred[:, 2:4] / 2), 1)
            keep = python_nms(boxes, pred[:, 4], 0.5)
            results.append({"boxes": boxes[keep], "scores": pred[keep, 4]})
        return results


def while_loop_nms() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = WhileLoopNms().eval()
    _standardize(model.cls, model.stem8(model.stem4(_calibration_images())), slice(None), 0.0, 2.0)
    return model, (images(2, 0),)


# 9. SSD (ssd.pytorch's Detect): priors, variance decode, softmax with background 0, then per
#    class a threshold and an NMS, the classes concatenated.

def _priors(size: int, strides: tuple[int, ...], scales: tuple[float, ...]) -> torch.Tensor:
    """cx, cy, w, h in [0, 1]: one square and one 2:1 prior per cell of each level."""
    out = []
    for stride, scale in zip(strides, scales, strict=True):
        n = size // stride
        for i in range(n):
            for j in range(n):
                cx, cy = (j + 0.5) / n, (i + 0.5) / n
                out += [[cx, cy, scale, scale], [cx, cy, scale * 1.4, scale / 1.4]]
    return torch.tensor(out)


def decode(loc: torch.Tensor, priors: torch.Tensor, variances: tuple[float, float]) -> torch.Tensor:
    boxes = torch.cat((priors[:, :2] + loc[:, :2] * variances[0] * priors[:, 2:],
                       priors[:, 2:] * torch.exp(loc[:, 2:] * variances[1])), 1)
    boxes[:, :2] -= boxes[:, 2:] / 2
    boxes[:, 2:] += boxes[:, :2]
    return boxes


class Ssd(nn.Module):
    def __init__(self, num_classes: int = 4, width: int = 16, conf_thresh: float = 0.8, nms_thresh: float = 0.45,
                 top_k: int = 200) -> None:
        super().__init__()
        self.num_classes, self.conf_thresh, self.nms_thresh, self.top_k = num_classes, conf_thresh, nms_thresh, top_k
        self.stem = _stem((width, width, 2 * width))
        self.down = nn.Sequential(nn.Conv2d(2 * width, 2 * width, 3, 2, 1), nn.ReLU())
        self.loc = nn.ModuleList(nn.Conv2d(2 * width, 2 * 4, 3, padding=1) for _ in range(2))
        self.conf = nn.ModuleList(nn.Conv2d(2 * width, 2 * num_classes, 3, padding=1) for _ in range(2))
        self.register_buffer("priors", _priors(SIZE, (8, 16), (0.1, 0.25)))

    def features(self, images: torch.Tensor) -> list[torch.Tensor]:
        p3 = self.stem(images)
        return [p3, self.down(p3)]

    def forward(self, images: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        loc, conf = [], []
        for f, lh, ch in zip(self.features(images), self.loc, self.conf, strict=True):
            loc.append(lh(f).permute(0, 2, 3, 1).contiguous().view(f.size(0), -1))
            conf.append(ch(f).permute(0, 2, 3, 1).contiguous().view(f.size(0), -1))
        loc_data = torch.cat(loc, 1).view(images.size(0), -1, 4)
        conf_data = F.softmax(torch.cat(conf, 1).view(images.size(0), -1, self.num_classes), -1)
        results = []
        for i in range(images.size(0)):
            decoded = decode(loc_data[i], self.priors, (0.1, 0.2)) * images.size(-1)
            conf_scores = conf_data[i].clone()
            boxes_all, scores_all, labels_all = [], [], []
            for cl in range(1, self.num_classes):
                c_mask = conf_scores[:, cl].gt(self.conf_thresh)
                scores = conf_scores[:, cl][c_mask]
                boxes = decoded[c_mask]
                ids = nms(boxes, scores, self.nms_thresh)[: self.top_k]
                boxes_all.append(boxes[ids])
                scores_all.append(scores[ids])
                labels_all.append(torch.full_like(ids, cl))
            results.append({"boxes": torch.cat(boxes_all), "scores": torch.cat(scores_all),
                            "labels": torch.cat(labels_all)})
        return results


def ssd() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = Ssd().eval()
    for f, ch in zip(model.features(_calibration_images()), model.conf, strict=True):
        _standardize(ch, f, slice(None), 0.0, 2.0)
    return model, (images(2, 0),)


# 10. RetinaFace (Pytorch_Retinaface's detect.py, in torch): box and five-landmark decode from
#     priors, face score = softmax[..., 1], where() filter, argsort, top_k, NMS, keep_top_k.

def decode_landm(pre: torch.Tensor, priors: torch.Tensor, variances: tuple[float, float]) -> torch.Tensor:
    return torch.cat([priors[:, :2] + pre[:, 2 * k:2 * k + 2] * variances[0] * priors[:, 2:] for k in range(5)], 1)


def _per_prior(feats: list[torch.Tensor], heads: nn.ModuleList, n: int) -> torch.Tensor:
    out = [h(f).permute(0, 2, 3, 1).reshape(f.shape[0], -1, n) for f, h in zip(feats, heads, strict=True)]
    return torch.cat(out, 1)


class RetinaFace(nn.Module):
    def __init__(self, width: int = 16, confidence_threshold: float = 0.75, top_k: int = 500,
                 nms_threshold: float = 0.4, keep_top_k: int = 150) -> None:
        super().__init__()
        self.confidence_threshold, self.top_k = confidence_threshold, top_k
        self.nms_threshold, self.keep_top_k = nms_threshold, keep_top_k
        self.stem = _stem((width, width, 2 * width))
        self.down = nn.Sequential(nn.Conv2d(2 * width, 2 * width, 3, 2, 1), nn.ReLU())
        self.bbox = nn.ModuleList(nn.Conv2d(2 * width, 2 * 4, 1) for _ in range(2))
        self.cls = nn.ModuleList(nn.Conv2d(2 * width, 2 * 2, 1) for _ in range(2))
        self.landm = nn.ModuleList(nn.Conv2d(2 * width, 2 * 10, 1) for _ in range(2))
        self.register_buffer("priors", _priors(SIZE, (8, 16), (0.12, 0.3)))

    def features(self, images: torch.Tensor) -> list[torch.Tensor]:
        p3 = self.stem(images)
        return [p3, self.down(p3)]

    def forward(self, images: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        feats = self.features(images)
        loc, conf, landms = (_per_prior(feats, heads, n) for heads, n in ((self.bbox, 4), (self.cls, 2),
                                                                           (self.landm, 10)))
        im_height, im_width = images.shape[-2:]
        scale = torch.tensor([im_width, im_height, im_width, im_height], dtype=torch.float32)
        scale1 = scale[:2].repeat(5)
        results = []
        for i in range(images.shape[0]):
            boxes = decode(loc[i], self.priors, (0.1, 0.2)) * scale
            scores = F.softmax(conf[i], dim=-1)[:, 1]
            landm = decode_landm(landms[i], self.priors, (0.1, 0.2)) * scale1
            inds = torch.where(scores > self.confidence_threshold)[0]
            boxes, landm, scores = boxes[inds], landm[inds], scores[inds]
            order = scores.argsort(descending=True)[: self.top_k]
            boxes, landm, scores = boxes[order], landm[order], scores[order]
            keep = nms(boxes, scores, self.nms_threshold)
            keep = keep[: self.keep_top_k]
            results.append({"boxes": boxes[keep], "scores": scores[keep], "landmarks": landm[keep].view(-1, 5, 2)})
        return results


def retinaface() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = RetinaFace().eval()
    for f, h in zip(model.features(_calibration_images()), model.cls, strict=True):
        _standardize(h, f, slice(None), 0.0, 1.0)
    return model, (images(2, 0),)


# 11. An anchor-free decode with torch.where on a score mask and nonzero (NanoDet / YOLOX style):
#     class-wise max, indices of the kept cells, index_select, batched NMS, [:max_det].

class NanoDet(nn.Module):
    def __init__(self, num_classes: int = 5, width: int = 16, score_thr: float = 0.45, iou_thr: float = 0.5,
                 max_det: int = 100) -> None:
        super().__init__()
        self.score_thr, self.iou_thr, self.max_det = score_thr, iou_thr, max_det
        self.stem = _stem((width, width, 2 * width))
        self.head = nn.Conv2d(2 * width, num_classes + 4, 1)

    def forward(self, images: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        out = self.head(self.stem(images))
        b, _, h, w = out.shape
        cls_scores = out[:, 4:].sigmoid().flatten(2).permute(0, 2, 1)
        dist = F.relu(out[:, :4]).flatten(2).permute(0, 2, 1) * 16
        ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        centers = (torch.stack((xs, ys, xs, ys), -1).view(-1, 4).float() + 0.5) * 8
        bboxes = centers + dist * torch.tensor([-1.0, -1.0, 1.0, 1.0])
        results = []
        for i in range(b):
            scores, labels = cls_scores[i].max(dim=1)
            valid_mask = scores > self.score_thr
            idx = torch.where(valid_mask, torch.ones_like(labels), torch.zeros_like(labels)).nonzero().squeeze(1)
            boxes = bboxes[i].index_select(0, idx)
            scores, labels = scores[idx], labels[idx]
            keep = batched_nms(boxes, scores, labels, self.iou_thr)[: self.max_det]
            results.append({"boxes": boxes[keep], "scores": scores[keep], "labels": labels[keep]})
        return results


def nanodet() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = NanoDet().eval()
    _standardize(model.head, model.stem(_calibration_images()), slice(4, None), -3.0, 2.0)
    with torch.no_grad():
        model.head.bias[:4].fill_(0.5)
    return model, (images(2, 0),)


FACTORIES = {
    "yolov5": yolov5, "centernet": centernet, "detr": detr, "fcos": fcos, "yolo_seg": yolo_seg,
    "yolo_obb": yolo_obb, "yolo_pose": yolo_pose, "ssd": ssd, "retinaface": retinaface, "nanodet": nanodet,
}
"""Every model that lowers (the while-loop NMS is refused by design, see ``while_loop_nms``)."""
