"""Exception types. Every failure fxdeploy reports is one of these, so callers can catch them."""

from __future__ import annotations

import os
import re
import sys


class FxDeployError(Exception):
    """Base class of every error fxdeploy raises on purpose."""


class CaptureError(FxDeployError):
    """The model could not be captured as a graph."""


class PassError(FxDeployError):
    """A graph pass failed; the message names the pass and what ran before it."""


class LoweringError(FxDeployError):
    """The captured graph could not be lowered for the chosen target."""


class DynamicSizesUnsupported(LoweringError):
    """The target's converter cannot keep the dims besides the batch dynamic (pnnx failing at a
    second input size): lower() lowers again with those dims fixed at the example's, and warns."""


class InputError(FxDeployError, ValueError):
    """Inputs given to a Deployed model do not match its manifest."""


class InferenceError(FxDeployError, RuntimeError):
    """The runtime failed on inputs that passed the manifest's checks; the message names the target,
    the input shapes and the runtime's own message."""


class ArtifactError(FxDeployError):
    """An artifact directory is missing, corrupt, tampered with or from an unknown schema."""


class TargetUnavailableError(FxDeployError, ImportError):
    """The runtime a target needs is not installed here."""


class RegistryError(FxDeployError):
    """A registry got a duplicate or an unknown key."""


class CompileFallbackWarning(UserWarning):
    """A torch.compile backend runs one graph dynamo gave it eagerly, since fxdeploy could not lower
    it; the message names the backend, the graph and the reason."""


class UnpackWarning(UserWarning):
    """A loaded artifact was lowered with a substitution's unpack, which is code and so not saved."""


class CalibrationWarning(UserWarning):
    """INT8 calibration samples span another range than the example inputs: the activation ranges
    they give may clip the inputs the artifact will see. The message gives both ranges."""


class TrainingModeWarning(UserWarning):
    """lower() was given a model with modules in training mode: it captures and checks in eval mode,
    so the artifact computes as ``model.eval()`` does. The message names the modules."""


class UnverifiedWarning(UserWarning):
    """A loaded artifact was lowered with ``verify=False``: nothing compared it with its model."""


_LOCATION = re.compile(r"(Exception from|Check '.*' failed at) \S+:\d+:?\.?")
"""A line that only says where a C++ library raised (OpenVINO's ``Exception from src/...cpp:84:``)."""
_SIGNATURE = re.compile(r"\S+\.(?:h|hpp|cc|cpp|cu):\d+ [\w:<>, *&]+\([^()]*\)(?: const)? ")
"""Where ONNX Runtime raised, in the line: ``.../attention_helper.h:70 onnxruntime::common::Status
onnxruntime::...::ComputeOutputShapeForAttention(const onnxruntime::Tensor*, ...) `` before its reason."""


def first_line(exc: BaseException, limit: int = 400) -> str:
    """``Type: first line of the message``, for errors that relay another library's exception.
    Lines that only name a C++ source location are passed over, a location and C++ signature
    inside a line are dropped (ONNX Runtime's), and a line ending in ``:`` is a
    heading, read on to the first line that says something (OpenVINO's reason comes several lines
    down: ``... Unsupported padding mode: [wrap]``)."""
    lines = [_SIGNATURE.sub("", line).strip() for line in str(exc).strip().splitlines() if line.strip()]
    said = [line for line in lines if not _LOCATION.fullmatch(line)] or lines[:1]
    parts: list[str] = []
    for line in said:
        parts.append(line)
        if not line.endswith(":"):
            break
    return f"{type(exc).__name__}: {' '.join(parts)}"[:limit]


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_stacklevel() -> int:
    """The ``stacklevel`` for ``warnings.warn`` (called by this function's caller) that names the first
    line outside fxdeploy: the user's call of ``lower()``, however deep inside it the warning is given."""
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level
