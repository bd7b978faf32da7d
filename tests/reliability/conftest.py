"""Shared set-up: every registered target, and the convnet lowered once per available target.

Lowering is the slow step (seconds per target), so one session-wide cache serves the input,
concurrency, fuzz and artifact tests. A target that cannot run here skips with its reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import fxdeploy
from examples import models
from tests.helpers import require_target as require

TARGETS = list(fxdeploy.targets())
"""Every registered target (built-in and entry-point ones), in registration order."""
AVAILABLE = [name for name, status in fxdeploy.targets().items() if status.available]
BATCH = ("batch", 1, 4)
TOLERANCE = {"ncnn": 1e-3, "tensorrt": 1e-3}
"""Max abs error against eager; 1e-4 for targets not listed (same figures as tests/e2e)."""


def tolerance(target: str) -> float:
    return TOLERANCE.get(target, 1e-4)


@dataclass(frozen=True)
class Lowered:
    model: torch.nn.Module
    deployed: fxdeploy.Deployed
    saved: Path


@pytest.fixture(scope="session")
def convnet(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Lowered]:
    """``convnet(target)``: examples/models.py convnet, dynamic batch 1..4, lowered and saved once."""
    cache: dict[str, Lowered] = {}
    root = tmp_path_factory.mktemp("convnet")

    def get(target: str) -> Lowered:
        require(target)
        if target not in cache:
            model, (x,) = models.convnet()
            deployed = fxdeploy.lower(model, (x,), target=target, dynamic_shapes={"x": {0: BATCH}})
            cache[target] = Lowered(model, deployed, deployed.save(root / target))
        return cache[target]

    return get
