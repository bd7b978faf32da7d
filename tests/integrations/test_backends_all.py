"""torch.compile with each runtime's fxdeploy backend, in a process that never imports fxdeploy.

One small model, two batch sizes (the second makes dynamo recompile with a dynamic batch). That
the runtime package got imported shows the backend really ran on that runtime.
"""

from __future__ import annotations

import pytest

import fxdeploy
from tests.helpers import require_target, run_python

BACKENDS = {"fxdeploy_openvino": "openvino", "fxdeploy_torchscript": "torchscript", "fxdeploy_ncnn": "ncnn"}
EVIDENCE = {"openvino": "openvino", "torchscript": "fxdeploy.runtime.torchscript", "ncnn": "ncnn"}
TOLERANCE = {"openvino": 1e-4, "torchscript": 1e-4, "ncnn": 1e-3}

CODE = """
import sys, torch
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Flatten(),
    torch.nn.Linear(8 * 14 * 14, 5),
).eval()
for backend, module in {backends!r}:
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend)
    errors = []
    with torch.no_grad():
        for batch in (2, 3):
            x = torch.randn(batch, 3, 16, 16)
            errors.append((compiled(x) - model(x)).abs().max().item())
    print(backend, max(errors), module in sys.modules)
"""


@pytest.fixture(scope="module")
def results() -> dict[str, tuple[float, bool]]:
    """One fresh interpreter compiles with every available backend (the start-up cost is paid once)."""
    wanted = [(b, EVIDENCE[t]) for b, t in BACKENDS.items() if fxdeploy.targets()[t].available]
    if not wanted:
        return {}
    out = run_python(CODE.format(backends=wanted), env={"PYTHONPATH": ""}, timeout=600)
    rows = [line.split() for line in out.strip().splitlines()]
    return {backend: (float(error), used == "True") for backend, error, used in rows}


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_compile_backend_matches_eager_without_importing_fxdeploy(results, backend: str) -> None:
    target = BACKENDS[backend]
    require_target(target)
    error, used = results[backend]
    assert error <= TOLERANCE[target], f"{backend}: max abs error {error}"
    assert used, f"{backend}: the {target} runtime was never imported, so it did not run"
