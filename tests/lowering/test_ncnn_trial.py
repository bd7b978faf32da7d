"""The lowering's trial run of an ncnn engine on the example image runs in a child process: fed the
wrong way, ncnn crashes (a Slice along an axis past the blob's), and lower()'s process died with it."""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest

from fxdeploy.lowering import ncnn_checks
from fxdeploy.lowering.ncnn_bisect import ValuesDiffer
from tests.helpers import require_target, run_python

SPLIT_ALONG_W = """
import torch, fxdeploy

class SplitW(torch.nn.Module):
    def forward(self, x):
        a, b = torch.split(x, [24, 40], dim=3)
        return a * 2.0, b + 1.0

model = SplitW().eval()
deployed = fxdeploy.lower(model, (torch.randn(1, 3, 64, 64),), target="ncnn", dynamic_shapes={"x": {2: ("h", 32, 128)}})
for h in (33, 64, 97):
    x = torch.randn(1, 3, h, 64)
    print(max(float((got - want).abs().max()) for got, want in zip(deployed(x), model(x))))
"""


def test_a_split_of_the_input_along_its_width_lowers_and_gives_eagers_values() -> None:
    """pnnx cannot tell the batch axis (no convolution before the split) and keeps it: its Slice cuts
    axis 3, past the per-image blob's three, and the trial fed without the batch axis segfaulted."""
    require_target("ncnn")
    errors = [float(line) for line in run_python(SPLIT_ALONG_W).split()]
    assert len(errors) == 3 and max(errors) <= 1e-6, errors


def test_a_crash_in_the_trial_is_a_failed_layout_and_the_next_is_tried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The child reports the first layout (wrong values) and dies on the second: both are said."""
    child = tmp_path / "child.py"
    child.write_text(
        "import json, os, signal\n"
        "print(json.dumps({'batched': False, 'errors': [0.5], 'ok': False}), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGSEGV)\n"
    )
    monkeypatch.setattr(ncnn_checks, "ncnn_trial", types.SimpleNamespace(__file__=str(child)))
    x, want = np.zeros((1, 3, 4, 4), np.float32), np.zeros((3, 4, 4), np.float32)
    with pytest.raises(ValuesDiffer) as info:
        ncnn_checks.input_layout(tmp_path, ("m.param", "m.bin"), [x], [want])
    message = str(info.value)
    assert "without the batch axis: output errors [0.5]" in message
    assert "with the batch axis: ncnn crashed (signal SIGSEGV) running the engine" in message
