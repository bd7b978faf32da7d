"""torchvision's detectors as torchvision ships them (``weights=None``), called the way its users
call them: ``model(list_of_images)``, which returns one dict of boxes, scores and labels per
image. No substitution: fxdeploy's passes make the postprocessing static.

Random weights give degenerate scores: BatchNorm at its initial statistics lets activations
vanish through ResNet-50, and the class prior bias keeps every score near 0.01. ``build`` first
gives BatchNorm real statistics from a few train-mode passes of the backbone over random images,
then scales the class layers so that scores spread and hundreds of candidates pass.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

SIZE = 320


class Detector(nn.Module):
    """``model(list(images))``: a batch tensor in, torchvision's list of dicts out."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        return self.model(list(images.unbind(0)))


def _models() -> dict[str, Callable[[], nn.Module]]:
    from torchvision.models import detection

    small = {"weights": None, "weights_backbone": None, "min_size": SIZE, "max_size": SIZE}
    return {
        "retinanet": lambda: detection.retinanet_resnet50_fpn(**small),
        "fcos": lambda: detection.fcos_resnet50_fpn(**small),
        "ssd300": lambda: detection.ssd300_vgg16(weights=None, weights_backbone=None, num_classes=21),
        "fasterrcnn": lambda: detection.fasterrcnn_resnet50_fpn(**small, box_detections_per_img=300),
    }


NAMES = ("retinanet", "fcos", "ssd300", "fasterrcnn")
"""SSD300 is built with Pascal VOC's 21 classes (the others with COCO's 91): its postprocess loops
over the classes in Python, so its captured graph grows with them, and at 91 a lowering took four
times as long."""


def _class_layers(name: str, model: nn.Module) -> list[nn.Module]:
    if name in ("retinanet", "fcos"):
        return [model.head.classification_head.cls_logits]
    if name == "ssd300":
        return list(model.head.classification_head.module_list)
    return [model.roi_heads.box_predictor.cls_score]


SCALES = {"retinanet": (50.0, -6.8), "fcos": (3.0, -5.75), "ssd300": (1.0, 14.0), "fasterrcnn": (10.0, 16.2)}
"""Per model: the class layers' weight scale and bias (for a softmax: the background's), which
put 50-200 detections in an image."""


def build(name: str, scale: float | None = None, bias: float | None = None, ties: bool = True) -> Detector:
    """torchvision's ``name`` with calibrated random weights, in eval mode, wrapped as ``Detector``.

    ``ties`` gives two outputs of the class layers the same weights (``_twin``), so that exact
    score ties occur in every image."""
    torch.manual_seed(0)
    model = _models()[name]()
    calibrate(model)
    default_scale, default_bias = SCALES[name]
    classes = _classes(name, model)
    bias = default_bias if bias is None else bias
    with torch.no_grad():
        for layer in _class_layers(name, model):
            layer.weight.mul_(default_scale if scale is None else scale)
            if name in SOFTMAX:  # only the background's bias (column 0 of each anchor)
                layer.bias.zero_()
                layer.bias[::classes] = bias
            else:
                layer.bias.fill_(bias)
    detector = Detector(model.eval())
    if ties:
        _twin(name, detector, classes)
    return detector


TWIN_RANK = {"ssd300": 0}
"""Which class gets a twin, by how often it is detected: the third (0: the first)."""


def _twin(name: str, detector: Detector, classes: int) -> None:
    """Exact score ties: a class no image detects gets the class weights of the third (or first,
    ``TWIN_RANK``) most detected one, at every anchor, so each of those detections has a twin of the same box and
    score under another label. Both survive the NMS (it runs per class), so eager's result does
    not hang on how torch.topk happens to order equal scores."""
    with torch.no_grad():
        counts = torch.cat([d["labels"] for d in detector(images(2, 100))]).bincount(minlength=classes)
        unused = int((counts[1:] == 0).nonzero()[0]) + 1
        used = int(counts.argsort(descending=True)[TWIN_RANK.get(name, 2)])
        for layer in _class_layers(name, detector.model):
            for start in range(0, layer.weight.shape[0], classes):  # anchor-major rows
                layer.weight[start + unused] = layer.weight[start + used]
                layer.bias[start + unused] = layer.bias[start + used]


SOFTMAX = ("ssd300", "fasterrcnn")
"""Scores from a softmax over the classes, background first."""


def _classes(name: str, model: nn.Module) -> int:
    if name == "fasterrcnn":
        return model.roi_heads.box_predictor.cls_score.out_features
    head = model.head.classification_head
    return head.num_columns if name == "ssd300" else head.num_classes


def calibrate(model: nn.Module, passes: int = 3) -> None:
    """BatchNorm statistics from train-mode passes of the backbone (the detector's own train mode
    wants targets) over random images, normalized by the detector's own transform."""
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    if not norms:
        return
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average over the passes
    model.eval()
    with torch.no_grad():
        for seed in range(passes):
            batch, _ = model.transform(list(images(2, 100 + seed)))
            model.backbone.train()
            model.backbone(batch.tensors)
    model.eval()


def images(count: int, seed: int, size: int = SIZE, contrast: float = 1.0) -> torch.Tensor:
    """Random images in [0.25, 0.75]; ``contrast`` > 1 on the first two saturates some scores."""
    x = torch.rand(count, 3, size, size, generator=torch.Generator().manual_seed(seed)) * 0.5 + 0.25
    x[:2] = ((x[:2] - 0.5) * contrast + 0.5).clamp(0, 1)
    return x


def retinanet() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """For ``fxdeploy lower examples/torchvision_detectors.py:retinanet``."""
    return build("retinanet"), (images(2, 0),)


def fcos() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return build("fcos"), (images(2, 0),)


def ssd300() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return build("ssd300"), (images(2, 0),)


def fasterrcnn() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return build("fasterrcnn"), (images(2, 0),)
