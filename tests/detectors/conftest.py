"""The detector suites: detectors as their libraries ship them, with no substitution.

``make test`` runs this folder on torch 2.14.1 with the real torchvision and Ultralytics, with
FXDEPLOY_REQUIRE_DETECTORS=1: there a missing library fails the test instead of skipping it.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

REQUIRED = os.environ.get("FXDEPLOY_REQUIRE_DETECTORS") == "1"
HERE = Path(__file__).parent
if "PYTEST_XDIST_WORKER" in os.environ and "YOLO_CONFIG_DIR" in os.environ:
    # Ultralytics writes its settings file on first import: one directory per worker, no race
    os.environ["YOLO_CONFIG_DIR"] = os.path.join(os.environ["YOLO_CONFIG_DIR"], os.environ["PYTEST_XDIST_WORKER"])


def require(module: str) -> None:
    """Import ``module``, or skip with the reason (fail where the detector leg must have it)."""
    try:
        importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - a broken install raises anything at import
        message = f"{module} does not import here ({type(exc).__name__}: {exc}); `make test-detectors` installs it"
        if REQUIRED:
            pytest.fail(message)
        pytest.skip(message)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.detectors)
