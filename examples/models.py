"""Small example models with factories for the CLI: ``examples/models.py:convnet``."""

from __future__ import annotations

import os

import torch
from torch import nn


class ConvNet(nn.Module):
    """A small ResNet-style classifier: conv, batch norm, residual blocks, pooling, linear."""

    def __init__(self, num_classes: int = 10, width: int = 32) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, stride=2, padding=1), nn.BatchNorm2d(width), nn.ReLU())
        self.block = nn.Sequential(
            nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width),
        )
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(width, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        return self.head(torch.relu(h + self.block(h)))


class DictMLP(nn.Module):
    """An MLP that returns a dict with a nested list, as postprocessing code often does."""

    def __init__(self, features: int = 16, hidden: int = 64) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU())
        self.score = nn.Linear(hidden, 1)
        self.embed = nn.Linear(hidden, 8)

    def forward(self, x: torch.Tensor) -> dict[str, object]:
        h = self.body(x)
        return {"score": torch.sigmoid(self.score(h)).squeeze(-1), "extra": [self.embed(h), h.mean(-1)]}


def convnet() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return ConvNet().eval(), (torch.randn(2, 3, 64, 64),)


def dict_mlp() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return DictMLP().eval(), (torch.randn(4, 16),)


def vit_tiny() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """transformers' ViT built from a small config with random weights (nothing downloaded)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    config = ViTConfig(
        image_size=64, patch_size=16, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, num_labels=10,
    )
    return ViTForImageClassification(config).eval(), (torch.randn(2, 3, 64, 64),)


def resnet50() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """transformers' ResNet-50 with random weights, batch 1, 224x224 (the benchmark model)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import ResNetConfig, ResNetForImageClassification

    torch.manual_seed(0)
    return ResNetForImageClassification(ResNetConfig()).eval(), (torch.randn(1, 3, 224, 224),)
