"""The plugin's own tests: fxdeploy's conformance suite on ``ort-extended``, and what it adds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import pytest
import torch

import fxdeploy
from fxdeploy.errors import TargetUnavailableError
from fxdeploy.testing import CHECKS, ConvNet


@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
def test_conformance(check: Any, tmp_path: Path) -> None:
    try:
        check("ort-extended", tmp_path)
    except TargetUnavailableError as exc:
        pytest.skip(str(exc))


def test_the_artifact_is_optimized_once_and_matches_eager(tmp_path: Path) -> None:
    model, x = ConvNet().eval(), torch.randn(2, 3, 16, 16)
    deployed = fxdeploy.lower(model, (x,), target="ort-extended")
    assert deployed.manifest["info"]["optimized"] is True
    assert deployed.manifest["info"]["target_origin"]["distribution"] == "fxdeploy-ortx"
    ops = {node.op_type for node in onnx.load(str(deployed.save(tmp_path / "a") / "model.onnx")).graph.node}
    assert "FusedConv" in ops and "Relu" not in ops, ops  # Conv+ReLU fused: an extended optimization
    with torch.no_grad():
        torch.testing.assert_close(fxdeploy.load(tmp_path / "a")(x), model(x), rtol=1e-4, atol=1e-5)


def test_the_level_setting_reaches_the_lowering(tmp_path: Path) -> None:
    """``level = "basic"`` is in the manifest, and leaves Conv+ReLU unfused (an extended fusion)."""
    from fxdeploy_ortx import OrtxSettings

    model, x = ConvNet().eval(), torch.randn(2, 3, 16, 16)
    settings = fxdeploy.Settings().with_sections(ortx=OrtxSettings(level="basic"))
    deployed = fxdeploy.lower(model, (x,), target="ort-extended", settings=settings)
    assert deployed.manifest["settings"]["ortx"] == {"level": "basic"}
    assert deployed.manifest["info"]["level"] == "basic"
    ops = {node.op_type for node in onnx.load(str(deployed.save(tmp_path / "a") / "model.onnx")).graph.node}
    assert "FusedConv" not in ops and "Relu" in ops, ops
    with torch.no_grad():
        torch.testing.assert_close(fxdeploy.load(tmp_path / "a")(x), model(x), rtol=1e-4, atol=1e-5)


def test_torch_compile_backend_by_name() -> None:
    model, x = ConvNet().eval(), torch.randn(2, 3, 16, 16)
    compiled = torch.compile(model, backend="fxdeploy_ortx")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
