"""torch.compile(backend="fxdeploy_ort") works in a fresh interpreter that never imports fxdeploy."""

from __future__ import annotations

from tests.helpers import run_python

CODE = """
import sys, torch
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Flatten(),
    torch.nn.Linear(8 * 14 * 14, 5),
).eval()
compiled = torch.compile(model, backend="fxdeploy_ort")
errors = []
with torch.no_grad():
    for batch in (2, 3, 2):
        x = torch.randn(batch, 3, 16, 16)
        errors.append((compiled(x) - model(x)).abs().max().item())
print(max(errors))
print("fxdeploy imported by torch" if "fxdeploy" in sys.modules else "fxdeploy not imported")
"""


def test_compile_backend_via_entry_point_in_fresh_process() -> None:
    out = run_python(CODE, env={"PYTHONPATH": ""}).split("\n")
    assert float(out[0]) <= 1e-4
    # torch imported fxdeploy itself, through the entry point; the user code never did.
    assert out[1] == "fxdeploy imported by torch"
