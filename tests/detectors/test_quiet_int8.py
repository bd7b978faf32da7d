"""INT8 on OpenVINO says nothing on the console under this leg's torch (a CUDA build, no GPU here).

NNCF's backend probe imports ``nncf.torch``, whose ``torch.utils.cpp_extension`` logged "No CUDA
runtime is found, using CUDA_HOME=..." on the first INT8 lowering of a process. A fresh process,
because the warning comes once per process, at that import."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.detectors.conftest import require

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import torch
    import fxdeploy

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 14 * 14, 4)).eval()
    calibration = [(torch.rand(1, 3, 16, 16),) for _ in range(8)]
    fxdeploy.lower(model, (torch.rand(1, 3, 16, 16),), target="openvino",
                   settings=fxdeploy.Settings(precision="int8"), calibration=calibration)
    print("lowered")
""")


def test_int8_on_openvino_is_quiet_in_a_fresh_process() -> None:
    require("nncf")
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "lowered\n" and done.stderr == "", (done.stdout[-1000:], done.stderr[-1000:])
