"""examples/ortx_target, the target package of docs/adding-a-target.md, pip-installs into a
separate site directory and passes its own tests there: fxdeploy's conformance suite, its
optimized artifact and its torch.compile backend. fxdeploy's own environment does not see it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fxdeploy.artifact import MANIFEST
from tests.helpers import ROOT

PLUGIN = ROOT / "examples" / "ortx_target"


def test_the_example_plugin_installs_and_passes_its_own_tests(tmp_path: Path) -> None:
    site = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(site), str(PLUGIN)],
        capture_output=True, text=True, timeout=600,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}", "HF_HUB_OFFLINE": "1"}
    check_env = subprocess.run([sys.executable, "-m", "fxdeploy.cli", "check-env"], capture_output=True, text=True,
                               env=env, timeout=300)
    row = next(line for line in check_env.stdout.splitlines() if "ort-extended" in line)
    assert "yes" in row and "fxdeploy-ortx 0.1.0" in row, check_env.stdout
    console = subprocess.run([str(site / "bin" / "fxdeploy-ortx")], capture_output=True, text=True, env=env,
                             timeout=300)
    assert console.returncode == 0 and "ort-extended: available" in console.stdout, console.stdout + console.stderr
    lowered = subprocess.run(
        [sys.executable, "-m", "fxdeploy.cli", "lower", "examples/models.py:convnet", "--target", "ort-extended",
         "--ortx-level", "basic", "--out", str(tmp_path / "art")],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=600,
    )
    assert lowered.returncode == 0 and "lowered ConvNet to ort-extended" in lowered.stdout, lowered.stderr[-2000:]
    manifest = json.loads((tmp_path / "art" / MANIFEST).read_text())
    assert manifest["settings"]["ortx"] == {"level": "basic"} and manifest["info"]["level"] == "basic"
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(PLUGIN / "tests")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=1200,
    )
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-2000:]
    assert "9 passed" in tests.stdout and "skipped" not in tests.stdout, tests.stdout[-2000:]
