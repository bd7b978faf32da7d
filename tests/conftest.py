"""Shared test set-up: offline transformers, pinned threads, repo root importable (examples/)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
torch.set_num_threads(2)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A module's ``in_make_test(test, params)`` picks which cases of its matrix ``make test`` runs;
    the others are marked ``full`` (``make test-full`` runs every case). Each module keeps every
    model and every target in ``make test``, so that a break anywhere shows in CI."""
    for item in items:
        choose = getattr(getattr(item, "module", None), "in_make_test", None)
        callspec = getattr(item, "callspec", None)
        if choose is not None and callspec is not None and not choose(item.originalname, dict(callspec.params)):
            item.add_marker(pytest.mark.full)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
