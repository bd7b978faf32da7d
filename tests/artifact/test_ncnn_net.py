"""``import_ncnn``: ncnn's own OpenMP runtime gets a short spin for the import only, and a spin
policy the user set stands. Each case runs in a fresh interpreter: libgomp reads its environment
once, when ncnn is first imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import require_target

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import json, os, sys
seen = {}
real_import = __builtins__.__import__
def spy(name, *args, **kwargs):
    if name == "ncnn" and "ncnn" not in sys.modules:
        seen["during"] = {k: os.environ.get(k) for k in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    return real_import(name, *args, **kwargs)
__builtins__.__import__ = spy  # this probe's own interpreter only
from fxdeploy.artifact.ncnn_net import import_ncnn
import_ncnn()
__builtins__.__import__ = real_import
seen["after"] = {k: os.environ.get(k) for k in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
print(json.dumps(seen))
"""


def _probe(**env: str) -> dict[str, dict[str, str | None]]:
    clean = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    ran = subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout.strip().splitlines()[-1])


def test_ncnn_is_imported_with_a_short_spin_and_the_environment_given_back() -> None:
    require_target("ncnn")
    from fxdeploy.artifact.ncnn_net import SPIN_COUNT

    seen = _probe()
    assert seen["during"] == {"GOMP_SPINCOUNT": SPIN_COUNT, "OMP_WAIT_POLICY": None}
    assert seen["after"] == {"GOMP_SPINCOUNT": None, "OMP_WAIT_POLICY": None}


@pytest.mark.parametrize("name, value", [("GOMP_SPINCOUNT", "300000"), ("OMP_WAIT_POLICY", "ACTIVE")])
def test_a_spin_policy_the_user_set_stands(name: str, value: str) -> None:
    require_target("ncnn")
    seen = _probe(**{name: value})
    assert seen["during"][name] == value and seen["after"][name] == value
    other = "OMP_WAIT_POLICY" if name == "GOMP_SPINCOUNT" else "GOMP_SPINCOUNT"
    assert seen["during"][other] is None
