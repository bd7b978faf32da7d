"""fxdeploy: capture a PyTorch model as a graph, rewrite it for a target, lower it, run it.

``import fxdeploy`` needs only torch, numpy, onnx, onnxscript and onnxruntime; every other
runtime is imported when its target is used.
"""

from __future__ import annotations

from fxdeploy import ops
from fxdeploy.api import load, lower
from fxdeploy.capture.substitution import Substitution, substitute
from fxdeploy.deployed import Deployed
from fxdeploy.errors import (
    ArtifactError,
    CaptureError,
    FxDeployError,
    InferenceError,
    InputError,
    LoweringError,
    PassError,
    TargetUnavailableError,
)
from fxdeploy.quantize import Calibration
from fxdeploy.settings import Settings
from fxdeploy.targets import TargetStatus
from fxdeploy.version import __version__


def targets() -> dict[str, TargetStatus]:
    """Every registered target, and whether it can run here (with the reason when it cannot)."""
    from fxdeploy.targets import statuses

    return statuses()


__all__ = [
    "ArtifactError",
    "Calibration",
    "CaptureError",
    "Deployed",
    "FxDeployError",
    "InferenceError",
    "InputError",
    "LoweringError",
    "PassError",
    "Settings",
    "Substitution",
    "TargetStatus",
    "TargetUnavailableError",
    "__version__",
    "load",
    "lower",
    "ops",
    "substitute",
    "targets",
]
