"""The model zoo: real transformers models, built from configs with random weights (nothing downloads).

Classifiers (ResNet-50, a small ResNet, a small ViT) deploy as they are. Detectors (DETR, RT-DETR,
YOLOS) are wrapped the way a user runs them: the HF model, then the image processor's
``post_process_object_detection``, which loops over images and filters with boolean masks, so
torch.export cannot capture it with a dynamic batch. Each detector deploys with ONE substitution
of that method (applied on the processor instance the wrapper holds, never on the class): a
tensor-only replacement with static, padded outputs built on ``fxdeploy.ops.multiclass_nms``
(iou_threshold=1.0, so it only thresholds, ranks and pads), plus an ``unpack`` that slices the
padding off on the host and returns exactly what eager returns: a list of per-image dicts
``{"scores", "labels", "boxes"}``, in eager's order.

Without torchvision, ``transformers.DetrImageProcessor`` (and the others) resolve to the PIL
variants; both carry the same ``post_process_object_detection``, and the substitutions are keyed
by whichever class that name resolves to here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import nn

import fxdeploy
from fxdeploy import Substitution

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import transformers  # noqa: E402 - after HF_HUB_OFFLINE: nothing here may reach a hub
from transformers import (  # noqa: E402
    DetrConfig,
    DetrForObjectDetection,
    ResNetConfig,
    ResNetForImageClassification,
    RTDetrConfig,
    RTDetrForObjectDetection,
    RTDetrResNetConfig,
    ViTConfig,
    ViTForImageClassification,
    YolosConfig,
    YolosForObjectDetection,
)
from transformers.models.rt_detr.modeling_rt_detr import (  # noqa: E402
    RTDetrMultiscaleDeformableAttention,
    RTDetrSinePositionEmbedding,
)

from examples.zoo_deformable import deformable_attention, sine_positions  # noqa: E402
from examples.zoo_vit import VIT_SUBSTITUTIONS, AnyResolution  # noqa: E402

transformers.logging.set_verbosity_error()  # the "no torchvision, using the PIL processor" notice
Factory = Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]
Detections = list[dict[str, torch.Tensor]]
Padded = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


class DetectorWithPostprocess(nn.Module):
    """An HF detector followed by its processor's ``post_process_object_detection``, as users call it.

    ``target_size`` (height, width) is the size of the original images; boxes come back in its
    pixels. It is given as a [B, 2] tensor, as batched user code does (a list of tuples would tie
    the list length to a Python int, which a dynamic batch cannot be).
    """

    def __init__(self, model: nn.Module, processor: Any, threshold: float, target_size: tuple[int, int]) -> None:
        super().__init__()
        self.model = model
        self.processor = processor  # a plain object: substitutions override its method on this instance
        self.threshold = threshold
        self.target_size = target_size

    def forward(self, pixel_values: torch.Tensor) -> Detections:
        outputs = self.model(pixel_values=pixel_values)
        sizes = torch.tensor([self.target_size], dtype=torch.float32).expand(pixel_values.shape[0], 2)
        return self.processor.post_process_object_detection(outputs, threshold=self.threshold, target_sizes=sizes)


def _scaled_corners(pred_boxes: torch.Tensor, target_sizes: Any) -> torch.Tensor:
    """Relative (cx, cy, w, h) to (x1, y1, x2, y2) in target pixels, as the processors compute it
    (``center_to_corners_format``, then times (w, h, w, h) from a list of (h, w) tuples or a [B, 2]
    tensor; the list is a constant here, not a loop).

    The same arithmetic element by element, written with slices and one concatenation where
    transformers unbinds and stacks: 6 ONNX nodes instead of 17, and no ``unbind``, which pnnx keeps
    as a layer ncnn cannot run once H and W are dynamic.
    """
    center, size = pred_boxes[..., :2], pred_boxes[..., 2:]
    boxes = torch.cat([center - 0.5 * size, center + 0.5 * size], dim=-1)
    if target_sizes is None:
        return boxes
    sizes = torch.as_tensor(target_sizes).to(boxes)  # [B, 2]: (h, w)
    scale = torch.cat([sizes[:, 1:], sizes[:, :1]], dim=1).repeat(1, 2)  # (w, h, w, h)
    return boxes * scale[:, None, :]


def _threshold_in_query_order(probs: torch.Tensor, boxes: torch.Tensor, threshold: float) -> Padded:
    """DETR/YOLOS semantics: per query its best class, kept where score > threshold, in query order.

    ``probs`` [B, Q, C + 1] still holds the "no object" column, which never wins. multiclass_nms
    ranks by score and breaks ties by the lower box index (docs/nms-spec.md, step 4), so it is given the
    keep indicator (1.0 where score > threshold, else 0.0) as the one class's score: every kept
    query ties, its rows come in query order, score_threshold 0.5 drops the rest, and
    iou_threshold 1.0 suppresses nothing (one TopK on every ONNX target). The real scores and the
    labels (``max``'s first maximum, as eager) are gathered by the returned index. Padding rows
    keep the op's values: det_scores is 1.0 on kept rows and 0 on padding, so the product pads
    scores with 0, and labels with -1. One sort and three gathers, where re-ordering by-score rows
    took two sorts and six.
    """
    queries = probs.shape[1]
    probs = probs[..., :-1]
    scores, labels = probs.amax(-1), probs.argmax(-1)  # not max(-1): ncnn has no two-output max
    kept = (scores > threshold).to(scores.dtype).unsqueeze(-1)
    det_boxes, det_scores, _, counts, index = fxdeploy.ops.multiclass_nms(
        boxes, kept, iou_threshold=1.0, score_threshold=0.5,
        max_output_boxes_per_class=queries, keep_top_k=queries, output_index=True,
    )
    rows = index.clamp(min=0)
    labels = torch.where(index >= 0, labels.gather(1, rows), -1)
    return det_boxes, scores.gather(1, rows) * det_scores, labels, counts


def detr_postprocess(self: Any, outputs: Any, threshold: float = 0.5, target_sizes: Any = None) -> Padded:
    """Tensor-only ``{Detr,Yolos}ImageProcessor.post_process_object_detection`` (softmax, no top-k)."""
    probs = nn.functional.softmax(outputs.logits, -1)
    return _threshold_in_query_order(probs, _scaled_corners(outputs.pred_boxes, target_sizes), threshold)


def rt_detr_postprocess(
    self: Any, outputs: Any, threshold: float = 0.5, target_sizes: Any = None, use_focal_loss: bool = True
) -> Padded:
    """Tensor-only ``RTDetrImageProcessor.post_process_object_detection``.

    Focal (the default): eager keeps the top num_queries (query, class) pairs by sigmoid score,
    then those above the threshold, by descending score. multiclass_nms with iou_threshold=1.0 and
    per-class caps of num_queries keeps the same pairs in the same order (only exact score ties
    may order differently: eager's top-k breaks them by query, multiclass_nms by class first).
    Non-focal: eager takes ``softmax`` without ``dim`` (dim 0 on 3-D logits) and keeps query order.
    """
    boxes = _scaled_corners(outputs.pred_boxes, target_sizes)
    if not use_focal_loss:
        return _threshold_in_query_order(nn.functional.softmax(outputs.logits, dim=0), boxes, threshold)
    queries = outputs.logits.shape[1]
    det_boxes, det_scores, det_labels, counts = fxdeploy.ops.multiclass_nms(
        boxes, outputs.logits.sigmoid(), iou_threshold=1.0, score_threshold=threshold,
        max_output_boxes_per_class=queries, keep_top_k=queries,
    )
    return det_boxes, det_scores, det_labels, counts


def unpack(outputs: Padded) -> Detections:
    """Host side: padded [B, K] outputs back to eager's list of per-image dicts (its key order).

    The rows are cut as numpy views and wrapped back, no copies: this runs on every call, and
    three numpy slices cost far less than six torch indexing ops (select, then slice) after an
    engine call has evicted torch's dispatch path from the caches (~14 us of a 0.6 ms DETR call).
    """
    boxes, scores, labels, counts = (t.numpy() for t in outputs)  # CPU tensors from every executor
    wrap = torch.from_numpy
    return [
        {"scores": wrap(scores[i, :n]), "labels": wrap(labels[i, :n]), "boxes": wrap(boxes[i, :n])}
        for i, n in enumerate(counts.tolist())
    ]


def _substitution(processor_class: type, replacement: Callable[..., Padded]) -> dict[Any, Substitution]:
    target = processor_class.post_process_object_detection
    return {target: Substitution(target, replacement, unpack=unpack)}


DETR_SUBSTITUTIONS = _substitution(transformers.DetrImageProcessor, detr_postprocess)
YOLOS_SUBSTITUTIONS = _substitution(transformers.YolosImageProcessor, detr_postprocess)
RT_DETR_SUBSTITUTIONS = {
    **_substitution(transformers.RTDetrImageProcessor, rt_detr_postprocess),
    RTDetrMultiscaleDeformableAttention.forward: Substitution(
        RTDetrMultiscaleDeformableAttention.forward, deformable_attention
    ),
    RTDetrSinePositionEmbedding.forward: Substitution(RTDetrSinePositionEmbedding.forward, sine_positions),
}
"""The postprocess, the decoder's deformable attention at four dims per image (ncnn's limit), and
the encoder's position embedding without an ``int()`` of run-time sizes (examples/zoo_deformable.py)."""
FXDEPLOY_SUBSTITUTIONS = {**DETR_SUBSTITUTIONS, **YOLOS_SUBSTITUTIONS, **RT_DETR_SUBSTITUTIONS, **VIT_SUBSTITUTIONS}
"""Picked up by the CLI and the benchmark's subprocesses (``examples/zoo.py:detr_small``)."""


def _images(batch: int, height: int, width: int) -> tuple[torch.Tensor]:
    """Normalized images, as the processors' ``preprocess`` would hand them to the model."""
    return (torch.randn(batch, 3, height, width, generator=torch.Generator().manual_seed(0)),)


def resnet50() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The real default ResNetConfig (ResNet-50: bottleneck, depths 3-4-6-3), 224x224."""
    torch.manual_seed(0)
    return ResNetForImageClassification(ResNetConfig()).eval(), _images(2, 224, 224)


def resnet_small() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """A four-stage basic-block ResNet, narrow and one block deep: the fast classifier."""
    torch.manual_seed(0)
    config = ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], layer_type="basic", num_labels=10
    )
    return ResNetForImageClassification(config).eval(), _images(2, 64, 64)


def vit_small() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """ViT-style encoder, 4 layers of width 192 over 6x6 patches of a 96x96 image, called with
    ``interpolate_pos_encoding=True`` so that it takes other sizes (examples/zoo_vit.py)."""
    torch.manual_seed(0)
    config = ViTConfig(
        image_size=96, patch_size=16, hidden_size=192, num_hidden_layers=4, num_attention_heads=3,
        intermediate_size=768, num_labels=10,
    )
    return AnyResolution(ViTForImageClassification(config)).eval(), _images(2, 96, 96)


def _spread_class_logits(head: nn.Linear, std: float, bias: float) -> None:
    """Random heads give near-uniform (or saturated) scores, so nothing or everything passes the
    threshold and the parity check would be vacuous. With these logits and each factory's
    threshold, 20-60% of the queries are kept, and the count varies from image to image."""
    with torch.no_grad():
        head.weight.normal_(0.0, std)
        head.bias.fill_(bias)


def _trained_like_init(model: nn.Module, *queries: torch.Tensor) -> None:
    """Make random weights behave like a trained checkpoint's: O(1) activations, distinct queries.

    transformers initializes these detectors for training (linears, convs and even batch-norm
    scales at std 0.01-0.02, learned queries near zero). Run as is, RT-DETR's encoder output
    decays to ~1e-10 (every batch norm scales by ~0.01), so every proposal scores the same and
    its top-k picks among exact ties; and every DETR/YOLOS query predicts the same box. Xavier
    linears (DETR's reference init), fan-in convs, unit batch-norm scales and spread-out queries
    give parity checks that mean something. The backbone keeps its own (kaiming) init.
    """
    with torch.no_grad():
        for name, module in model.named_modules():
            if "backbone" in name:
                continue
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
            elif isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
        for param in queries:
            param.normal_(0.0, 3.0)


def _small_resnet_backbone(config_class: type = ResNetConfig, **kwargs: Any) -> Any:
    return config_class(
        embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], layer_type="basic", **kwargs
    )


def detr_small() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """DETR with its own (transformers) ResNet backbone: no timm, no pretrained download."""
    torch.manual_seed(0)
    config = DetrConfig(
        use_timm_backbone=False, use_pretrained_backbone=False,
        backbone_config=_small_resnet_backbone(out_features=["stage4"]),
        d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=128, decoder_ffn_dim=128, num_queries=30, num_labels=10,
    )
    model = DetrForObjectDetection(config).eval()
    _trained_like_init(model, model.model.query_position_embeddings.weight)
    _spread_class_logits(model.class_labels_classifier, 0.3, 0.0)
    wrapper = DetectorWithPostprocess(model, transformers.DetrImageProcessor(), 0.4, (480, 640))
    return wrapper.eval(), _images(2, 128, 128)


def rt_detr_small() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """RT-DETR with an RT-DETR ResNet backbone built from its config (three feature levels)."""
    torch.manual_seed(0)
    config = RTDetrConfig(
        backbone_config=_small_resnet_backbone(RTDetrResNetConfig, out_features=["stage2", "stage3", "stage4"]),
        use_pretrained_backbone=False, encoder_in_channels=[32, 64, 128], encoder_hidden_dim=64,
        encoder_ffn_dim=128, encoder_attention_heads=4, d_model=64, decoder_in_channels=[64, 64, 64],
        decoder_ffn_dim=128, decoder_attention_heads=4, decoder_layers=2, num_queries=30, num_labels=10,
    )
    model = RTDetrForObjectDetection(config).eval()
    _trained_like_init(model)
    for head in model.model.decoder.class_embed:
        _spread_class_logits(head, 0.15, -1.5)
    _spread_class_logits(model.model.enc_score_head, 0.15, -1.5)
    wrapper = DetectorWithPostprocess(model, transformers.RTDetrImageProcessor(), 0.65, (480, 640))
    return wrapper.eval(), _images(2, 128, 128)


def yolos_small() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """YOLOS: a ViT over patches plus detection tokens, 2 layers of width 96."""
    torch.manual_seed(0)
    config = YolosConfig(
        image_size=[128, 128], patch_size=16, hidden_size=96, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=192, num_detection_tokens=20, num_labels=10,
    )
    model = YolosForObjectDetection(config).eval()
    embeddings = model.vit.embeddings
    _trained_like_init(model, embeddings.detection_tokens, embeddings.position_embeddings)
    _spread_class_logits(model.class_labels_classifier.layers[-1], 0.3, 0.0)
    wrapper = DetectorWithPostprocess(model, transformers.YolosImageProcessor(), 0.3, (480, 640))
    return wrapper.eval(), _images(2, 128, 128)


class ZooEntry(NamedTuple):
    factory: Factory
    substitutions: dict[Any, Substitution] | None
    kind: str
    """"classifier" (compare tensors) or "detector" (compare detections, paired by IoU)."""
    dynamic_shapes: dict[str, dict[int, Any]]


def _dims(dynamic_hw: bool, multiple: int = 1) -> dict[str, dict[int, Any]]:
    """Batch 1-8; where the model allows it (see tests/zoo/known_failures.py) H and W 64-256, in
    multiples of ``multiple`` when the model needs that (a torch.export derived dim, ``32 * Dim``)."""
    batch = {0: ("batch", 1, 8)}
    if not dynamic_hw:
        return {"pixel_values": batch}
    if multiple == 1:
        return {"pixel_values": {**batch, 2: ("height", 64, 256), 3: ("width", 64, 256)}}
    h, w = (torch.export.Dim(name, min=64 // multiple, max=256 // multiple) for name in ("h", "w"))
    return {"pixel_values": {**batch, 2: multiple * h, 3: multiple * w}}


ZOO: dict[str, ZooEntry] = {
    "resnet50": ZooEntry(resnet50, None, "classifier", _dims(dynamic_hw=True)),
    "resnet_small": ZooEntry(resnet_small, None, "classifier", _dims(dynamic_hw=True)),
    "vit_small": ZooEntry(vit_small, VIT_SUBSTITUTIONS, "classifier", _dims(dynamic_hw=True)),
    "detr_small": ZooEntry(detr_small, DETR_SUBSTITUTIONS, "detector", _dims(dynamic_hw=True)),
    # RT-DETR's hybrid encoder concatenates 2x-upsampled maps with the next level's: H, W multiples of 32
    "rt_detr_small": ZooEntry(rt_detr_small, RT_DETR_SUBSTITUTIONS, "detector", _dims(dynamic_hw=True, multiple=32)),
    "yolos_small": ZooEntry(yolos_small, YOLOS_SUBSTITUTIONS, "detector", _dims(dynamic_hw=True)),
}
"""name -> (factory, substitutions or None, kind, dynamic_shapes for ``fxdeploy.lower``)."""
