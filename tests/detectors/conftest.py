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


MODEL_FIXTURES = ("detector", "yolo")
"""The module-scoped fixtures that build a model: one model's tests share a worker."""
LONGEST_FIRST = (
    "test_ultralytics.py::yolo11n.yaml",
    "test_torchvision.py::retinanet",
    "test_torchvision.py::ssd300",
    "test_torchvision.py::fcos",
    "test_ultralytics.py::yolov8n.yaml",
    "test_torchvision.py::fasterrcnn",
)
"""Groups by the time their tests take in ``make test`` (2026-11-25: 1,600 s, 1,330 s, 710 s,
460 s, 330 s, 230 s on two busy cores); every other group after them. ``make test-detectors``
hands groups out in this order (``--dist loadgroup --no-loadscope-reorder``), so the two workers
end close together instead of one worker running every torchvision model."""


def group_of(item: pytest.Item) -> str:
    """The item's ``xdist_group``: its module, and its model where a module-scoped fixture builds one."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    model = next((str(params[name]) for name in MODEL_FIXTURES if name in params), None)
    module = Path(str(item.fspath)).name
    return f"{module}::{model}" if model else module


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.detectors)
            item.add_marker(pytest.mark.xdist_group(group_of(item)))
    rank = {group: i for i, group in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(group_of(item), len(rank)) if HERE in Path(str(item.fspath)).parents else -1)
