"""fxdeploy's own targets pass the conformance suite that plugin targets run (fxdeploy.testing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fxdeploy.errors import TargetUnavailableError
from fxdeploy.testing import CHECKS

BUILTIN = ["onnxruntime", "openvino", "ncnn", "tensorrt", "torchscript"]


@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
@pytest.mark.parametrize("target", BUILTIN)
def test_builtin_target_conformance(target: str, check: Any, tmp_path: Path) -> None:
    try:
        check(target, tmp_path)
    except TargetUnavailableError as exc:
        pytest.skip(str(exc))
