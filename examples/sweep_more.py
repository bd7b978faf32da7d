"""Seven more families for the real-architecture sweep (examples/sweep.py): a second text encoder,
a generative decoder, speech, a detection transformer, an open-vocabulary (text-conditioned)
detector, a 3-D segmentation net and a modern convnet. Small configs, random weights."""

from __future__ import annotations

import torch
from torch import nn

BATCH = torch.export.Dim("batch", min=1, max=8)
VOCAB = 200


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def tokens(rows: int, length: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and an attention mask; every row after the first padded from two thirds on."""
    ids = torch.randint(0, VOCAB, (rows, length), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones(rows, length, dtype=torch.int64)
    mask[1:, length * 2 // 3:] = 0
    return ids, mask


class Detections(nn.Module):
    """A detector's class logits and boxes as one tensor, ``cat([logits, boxes], -1)``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        out = self.model(pixel_values)
        return torch.cat([out.logits, out.pred_boxes], -1)


class TextQueries(nn.Module):
    """OWL-ViT scoring three text queries per image: ``input_ids`` [3 * B, L] beside B images."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: torch.Tensor, pixel_values: torch.Tensor, attention_mask: torch.Tensor,
    ) -> torch.Tensor:
        out = self.model(input_ids=input_ids, pixel_values=pixel_values, attention_mask=attention_mask)
        return torch.cat([out.logits, out.pred_boxes], -1)


def distilbert() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """DistilBERT with an attention mask (the second sequence padded), dynamic batch and length."""
    from transformers import DistilBertConfig, DistilBertModel

    from examples.sweep import Encoder

    torch.manual_seed(0)
    config = DistilBertConfig(vocab_size=VOCAB, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                              max_position_embeddings=128)
    return Encoder(DistilBertModel(config)).eval(), tokens(2, 16)


def gpt2() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """GPT-2's decoder (causal attention and a padding mask), dynamic batch and length."""
    from transformers import GPT2Config, GPT2Model

    from examples.sweep import Encoder

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=128)
    return Encoder(GPT2Model(config)).eval(), tokens(2, 16)


def whisper_encoder() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Whisper's audio encoder on log-mel features [B, 16 mels, 100 frames]."""
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    from examples.sweep import FirstTensor

    torch.manual_seed(0)
    config = WhisperConfig(num_mel_bins=16, d_model=64, encoder_layers=2, encoder_attention_heads=4,
                           encoder_ffn_dim=128, max_source_positions=50)
    return FirstTensor(WhisperEncoder(config)).eval(), (_randn(2, 16, 100),)


def detr() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """DETR with a small ResNet backbone (no timm), 10 queries: logits and boxes."""
    from transformers import DetrConfig, DetrForObjectDetection, ResNetConfig

    torch.manual_seed(0)
    backbone = ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], out_features=["stage2"])
    config = DetrConfig(use_timm_backbone=False, backbone_config=backbone, d_model=32, encoder_layers=1,
                        decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                        encoder_ffn_dim=64, decoder_ffn_dim=64, num_queries=10, num_labels=5,
                        use_pretrained_backbone=False)
    return Detections(DetrForObjectDetection(config)).eval(), (_randn(2, 3, 64, 64),)


def owlvit() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """OWL-ViT, three text queries per image (text-conditioned detection)."""
    from transformers import OwlViTConfig, OwlViTForObjectDetection

    torch.manual_seed(0)
    config = OwlViTConfig(
        text_config={"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                     "num_attention_heads": 2, "max_position_embeddings": 16, "eos_token_id": VOCAB - 1,
                     "bos_token_id": 0, "pad_token_id": 1},
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                       "image_size": 64, "patch_size": 16},
        projection_dim=32,
    )
    return TextQueries(OwlViTForObjectDetection(config)).eval(), owlvit_inputs(2, 0)


def owlvit_inputs(images: int, seed: int) -> tuple[torch.Tensor, ...]:
    ids, mask = tokens(3 * images, 8, seed)
    ids[:, -1] = VOCAB - 1  # CLIP pools the text at its highest id, the end token
    return ids, _randn(images, 3, 64, 64, seed=seed), mask


def unet3d() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """monai's 3-D UNet (two strided levels: D, H, W multiples of 4)."""
    from monai.networks.nets import UNet

    torch.manual_seed(0)
    model = UNet(spatial_dims=3, in_channels=1, out_channels=2, channels=(8, 16, 32), strides=(2, 2), num_res_units=1)
    return model.eval(), (_randn(2, 1, 16, 16, 16),)


def convnext() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """transformers' ConvNeXt: 7 x 7 depthwise convolutions and channels-last layer norms."""
    from transformers import ConvNextConfig, ConvNextModel

    from examples.sweep import FirstTensor

    torch.manual_seed(0)
    config = ConvNextConfig(hidden_sizes=[16, 32], depths=[1, 1], num_stages=2)
    return FirstTensor(ConvNextModel(config)).eval(), (_randn(2, 3, 64, 64),)
