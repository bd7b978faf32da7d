"""Small helpers shared by tests: target availability, subprocess runs and max-error comparison."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils import _pytree as pytree

import fxdeploy

ROOT = Path(__file__).resolve().parent.parent


NOT_INSTALLABLE = frozenset({"tensorrt"})
"""Targets no machine here can install (TensorRT needs a CUDA GPU): they skip, even where required."""


def require_target(target: str) -> None:
    """Skip the test, with the reason, where ``target`` cannot run here; fail instead where the run
    requires every runtime that installs here (the detector leg: FXDEPLOY_REQUIRE_DETECTORS=1)."""
    status = fxdeploy.targets()[target]
    if not status.available:
        message = f"{target}: {status.reason}"
        if os.environ.get("FXDEPLOY_REQUIRE_DETECTORS") == "1" and target not in NOT_INSTALLABLE:
            pytest.fail(message + " (FXDEPLOY_REQUIRE_DETECTORS=1: every runtime that installs here must run)")
        pytest.skip(message)


def run_python(code: str, *, env: dict[str, str] | None = None, timeout: int = 300) -> str:
    """Run code in a fresh interpreter; fail the test with its stderr if it exits non-zero."""
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), **(env or {})}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=timeout, cwd=ROOT
    )
    assert result.returncode == 0, f"subprocess failed ({result.returncode}):\n{result.stderr[-4000:]}"
    return result.stdout


def max_abs_error(got: Any, want: Any) -> float:
    """Max |got - want| over every tensor leaf; structures must match exactly."""
    got_leaves, got_spec = pytree.tree_flatten(got)
    want_leaves, want_spec = pytree.tree_flatten(want)
    assert got_spec == want_spec, f"structure differs:\n{got_spec}\nvs\n{want_spec}"
    error = 0.0
    for g, w in zip(got_leaves, want_leaves, strict=True):
        if isinstance(w, torch.Tensor):
            assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
            error = max(error, (g.double() - w.double()).abs().max().item() if w.numel() else 0.0)
        else:
            assert g == w, (g, w)
    return error
