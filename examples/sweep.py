"""The real-architecture sweep: models nobody here wrote, each with the dynamic dims a deployer
declares for it. transformers, diffusers and monai, small configs, random weights (nothing downloads).

Each factory returns ``(model, example_inputs)``; ``SWEEP`` adds the dynamic shapes and, per model,
the sizes a test runs beside the example's. tests/zoo/test_sweep.py lowers each on every target
and checks it against eager or checks that the refusal says what to do; benchmarks/sweep.py puts
plain ``torch.onnx.export`` + ONNX Runtime beside it (benchmarks/README.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import nn

os.environ.setdefault("HF_HUB_OFFLINE", "1")

Factory = Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]


class FirstTensor(nn.Module):
    """A library model called on one input, returning its main tensor (``out[0]``)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)[0]


class Encoder(nn.Module):
    """A text encoder called with its attention mask: ``model(input_ids, attention_mask)[0]``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask)[0]


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _calibrated(model: nn.Module, example: torch.Tensor) -> nn.Module:
    """Random weights behaving like trained ones: BatchNorm statistics from three train-mode passes
    over random images, unit batch-norm scales, convolutions at fan-in scale and a classifier that
    is not all zeros: as
    transformers initializes them, activations vanish (MobileNetV2's logits were 1e-25,
    EfficientNet's 1e-34), and every output would match anything near zero."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
            elif isinstance(module, nn.Conv2d):  # transformers initializes them at std 0.02
                nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):  # and EfficientNet's batch-norm scales too
                nn.init.ones_(module.weight)
        model.train()
        for seed in range(3):
            model(torch.randn(4, *example.shape[1:], generator=torch.Generator().manual_seed(100 + seed)))
    return model.eval()


def bert() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """BERT with an attention mask (the second sequence padded), dynamic batch and length."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=200, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=128)
    ids = torch.randint(0, 200, (2, 16), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 16, dtype=torch.int64)
    mask[1, 11:] = 0
    return Encoder(BertModel(config)).eval(), (ids, mask)


def wav2vec2() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """wav2vec2's conv feature encoder (7 layers, stride 320 in all) and a transformer, on raw samples."""
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    torch.manual_seed(0)
    config = Wav2Vec2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                            conv_dim=(32,) * 7, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
                            do_stable_layer_norm=True, feat_extract_norm="layer")
    return FirstTensor(Wav2Vec2Model(config)).eval(), (_randn(2, 3200),)


def dinov2() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """DINOv2 over 14-pixel patches, position embeddings interpolated to the input's H and W."""
    from transformers import Dinov2Config, Dinov2Model

    torch.manual_seed(0)
    config = Dinov2Config(image_size=56, patch_size=14, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                          intermediate_size=128)
    return FirstTensor(Dinov2Model(config)).eval(), (_randn(2, 3, 56, 56),)


def segresnet() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """monai's 3-D SegResNet (three downsamplings: D, H, W multiples of 8)."""
    from monai.networks.nets import SegResNet

    torch.manual_seed(0)
    return SegResNet(spatial_dims=3, init_filters=8, in_channels=1, out_channels=2).eval(), (_randn(2, 1, 16, 16, 16),)


def efficientnet() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """transformers' EfficientNet classifier; its pooler is an AvgPool2d(hidden_dim, ceil_mode=True)."""
    from transformers import EfficientNetConfig, EfficientNetForImageClassification

    torch.manual_seed(0)
    config = EfficientNetConfig(image_size=64, width_coefficient=0.25, depth_coefficient=0.25, hidden_dim=320,
                                num_labels=10)
    x = _randn(2, 3, 64, 64)
    return _calibrated(FirstTensor(EfficientNetForImageClassification(config)), x), (x,)


def mobilenet_v2() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """transformers' MobileNetV2 classifier, dynamic height and width."""
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    torch.manual_seed(0)
    config = MobileNetV2Config(image_size=96, depth_multiplier=0.35, num_labels=10)
    x = _randn(2, 3, 96, 96)
    return _calibrated(FirstTensor(MobileNetV2ForImageClassification(config)), x), (x,)


def swin() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """transformers' Swin: shifted 4 x 4 windows, attention output permuted, made contiguous and viewed
    (plain torch.onnx.export fails to decompose it at a dynamic batch: passes/contiguous_reshapes.py)."""
    from transformers import SwinConfig, SwinModel

    torch.manual_seed(0)
    config = SwinConfig(image_size=64, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[1, 2], window_size=4)
    return FirstTensor(SwinModel(config)).eval(), (_randn(2, 3, 64, 64),)


class Denoiser(nn.Module):
    """diffusers' UNet2DModel at one timestep per image: ``unet(sample, t).sample``."""

    def __init__(self) -> None:
        super().__init__()
        from diffusers import UNet2DModel

        self.unet = UNet2DModel(sample_size=32, in_channels=3, out_channels=3, layers_per_block=1,
                                block_out_channels=(16, 32), norm_num_groups=8,
                                down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                                up_block_types=("AttnUpBlock2D", "UpBlock2D"))

    def forward(self, sample: torch.Tensor, timestep: torch.Tensor) -> torch.Tensor:
        return self.unet(sample, timestep).sample


def unet2d() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return Denoiser().eval(), (_randn(2, 3, 32, 32), torch.tensor([10.0, 500.0]))


class SweepEntry(NamedTuple):
    factory: Factory
    dynamic_shapes: Any
    """For ``fxdeploy.lower``: the dims a deployer of this model declares."""
    other_sizes: tuple[tuple[int, ...], ...]
    """Shapes of the first input at the second size a test runs (the batch is set by the test)."""


def _hw(multiple: int, low: int, high: int) -> dict[int, Any]:
    h, w = (torch.export.Dim(name, min=low, max=high) for name in ("h", "w"))
    return {2: multiple * h, 3: multiple * w}


BATCH, LENGTH = ("batch", 1, 8), ("length", 2, 64)
TEXT = ("bert", "distilbert", "gpt2")
"""Models taking token ids and an attention mask."""


def _more() -> dict[str, SweepEntry]:
    """examples/sweep_more.py's families: a text encoder, a decoder, speech, a detection transformer,
    a text-conditioned detector, 3-D segmentation, a modern convnet."""
    from examples import sweep_more as more

    text = {"input_ids": {0: BATCH, 1: LENGTH}, "attention_mask": {0: BATCH, 1: LENGTH}}
    images = torch.export.Dim("batch", min=1, max=8)
    cubes = {d: 4 * torch.export.Dim(f"k{d}", min=2, max=8) for d in (2, 3, 4)}
    return {
        "distilbert": SweepEntry(more.distilbert, text, ((24,),)),
        "gpt2": SweepEntry(more.gpt2, text, ((24,),)),
        "whisper_encoder": SweepEntry(more.whisper_encoder, {"x": {0: BATCH}}, ()),
        "detr": SweepEntry(more.detr, {"pixel_values": {0: BATCH}}, ()),
        "owlvit": SweepEntry(more.owlvit, {"input_ids": {0: 3 * images}, "pixel_values": {0: images},
                                           "attention_mask": {0: 3 * images}}, ()),
        "unet3d": SweepEntry(more.unet3d, {"x": {0: BATCH, **cubes}}, ((1, 8, 12, 20),)),
        "convnext": SweepEntry(more.convnext, {"x": {0: BATCH, **_hw(8, 4, 20)}}, ((3, 96, 128),)),
    }
SWEEP: dict[str, SweepEntry] = {
    "bert": SweepEntry(bert, {"input_ids": {0: BATCH, 1: LENGTH}, "attention_mask": {0: BATCH, 1: LENGTH}}, ((24,),)),
    "wav2vec2": SweepEntry(wav2vec2, {"x": {0: BATCH, 1: ("samples", 1600, 16000)}}, ((4800,),)),
    "dinov2": SweepEntry(dinov2, {"x": {0: BATCH, **_hw(14, 2, 8)}}, ((3, 42, 70),)),
    "segresnet": SweepEntry(
        segresnet, {"x": {0: BATCH, **{d: 8 * torch.export.Dim(f"k{d}", min=1, max=4) for d in (2, 3, 4)}}},
        ((1, 8, 16, 24),),
    ),
    "efficientnet": SweepEntry(efficientnet, {"x": {0: BATCH, 2: ("height", 64, 160), 3: ("width", 64, 160)}},
                               ((3, 96, 128),)),
    "mobilenet_v2": SweepEntry(mobilenet_v2, {"x": {0: BATCH, 2: ("height", 64, 160), 3: ("width", 64, 160)}},
                               ((3, 128, 80),)),
    "swin": SweepEntry(swin, {"x": {0: BATCH}}, ()),
    "unet2d": SweepEntry(unet2d, {"sample": {0: BATCH, **_hw(4, 4, 16)}, "timestep": {0: BATCH}}, ((3, 48, 32),)),
    **_more(),
}
"""name -> (factory, dynamic_shapes, other sizes)."""


def make_inputs(name: str, batch: int, other_size: bool, seed: int = 1) -> tuple[torch.Tensor, ...]:
    """Fresh inputs for ``name`` at ``batch``: at the example's size, or at its entry's other size."""
    _, example = SWEEP[name].factory()
    gen = torch.Generator().manual_seed(seed)
    first = example[0]
    shape = (batch, *(SWEEP[name].other_sizes[0] if other_size else first.shape[1:]))
    if name == "owlvit":
        from examples.sweep_more import owlvit_inputs

        return owlvit_inputs(batch, seed)
    if name in TEXT:
        ids = torch.randint(0, 200, shape, generator=gen)
        mask = torch.ones(shape, dtype=torch.int64)
        mask[1:, shape[1] * 2 // 3:] = 0  # every sequence after the first is padded
        return ids, mask
    x = torch.randn(shape, generator=gen)
    if name == "unet2d":
        return x, torch.rand(batch, generator=gen) * 1000
    return (x,)


CHECKED_BATCHES = (1, 3)


def worst_relative_error(name: str, model: nn.Module, run: Callable[..., torch.Tensor]) -> float:
    """``run`` against eager ``model`` at batch 1 and 3, at the example's size and the other size:
    the largest max |run - eager| / max |eager| over those four calls."""
    worst = 0.0
    for other_size in (False, True) if SWEEP[name].other_sizes else (False,):
        for batch in CHECKED_BATCHES:
            inputs = make_inputs(name, batch, other_size)
            with torch.no_grad():
                want = model(*inputs)
            got = run(*inputs)
            if not isinstance(got, torch.Tensor) or got.shape != want.shape:
                raise AssertionError(f"{name} at {[tuple(x.shape) for x in inputs]}: got "
                                     f"{getattr(got, 'shape', type(got).__name__)}, eager {tuple(want.shape)}")
            error = float((got.double() - want.double()).abs().max() / want.double().abs().max().clamp_min(1e-12))
            worst = max(worst, error)
    return worst
