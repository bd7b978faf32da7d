"""The target conformance suite: what every target, built-in or plugin, must do.

Each check is a plain function ``check(target, workdir)`` that raises ``AssertionError`` saying
what differs, or ``TargetUnavailableError`` where the target cannot run here. A target package
runs the suite from its own tests:

    import pytest
    from fxdeploy.errors import TargetUnavailableError
    from fxdeploy.testing import CHECKS

    @pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
    def test_conformance(check, tmp_path):
        try:
            check("my-target", tmp_path)
        except TargetUnavailableError as exc:
            pytest.skip(str(exc))

fxdeploy's own targets run the same suite (tests/targets/test_conformance.py).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

import fxdeploy
from fxdeploy.errors import InputError

TOLERANCE = 1e-3
"""Max abs error against eager (ncnn's float32 kernels reach ~1e-4 on these models)."""


class ConvNet(nn.Module):
    """A convolution, batch norm, pooling and a linear head: the ops every runtime has."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x).flatten(1))


class Nms(nn.Module):
    """``multiclass_nms`` on the boxes and class logits given: the one NMS contract (docs/nms-spec.md)."""

    def forward(self, boxes: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return fxdeploy.ops.multiclass_nms(boxes, logits.sigmoid(), iou_threshold=0.5, score_threshold=0.3,
                                           keep_top_k=20)


def _images(batch: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, 3, 16, 16, generator=torch.Generator().manual_seed(seed))


def _lower(target: str, model: nn.Module, inputs: tuple[torch.Tensor, ...], **kwargs: object) -> fxdeploy.Deployed:
    fxdeploy.targets()  # plugins registered
    from fxdeploy.targets import get_target

    get_target(target).require()
    return fxdeploy.lower(model.eval(), inputs, target=target, **kwargs)


def _close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    error = float((got.double() - want.double()).abs().max()) if want.numel() else 0.0
    shapes = f"shape {tuple(got.shape)} vs {tuple(want.shape)}"
    assert got.shape == want.shape and error <= TOLERANCE, f"{what}: {shapes}, max abs error {error:.3g}"


def check_parity(target: str, workdir: Path) -> None:
    """A small CNN matches eager PyTorch."""
    model, x = ConvNet().eval(), _images(2)
    with torch.no_grad():
        _close(_lower(target, model, (x,))(x), model(x), f"{target}: ConvNet")


def check_dynamic_batch(target: str, workdir: Path) -> None:
    """A dynamic batch (1..4) is recorded in the manifest and runs at 1 and 3."""
    model = ConvNet().eval()
    deployed = _lower(target, model, (_images(2),), dynamic_shapes={"x": {0: ("batch", 1, 4)}})
    assert deployed.manifest["dims"]["batch"] == {"min": 1, "opt": 2, "max": 4}, deployed.manifest["dims"]
    for batch in (1, 3):
        x = _images(batch, seed=batch)
        with torch.no_grad():
            _close(deployed(x), model(x), f"{target}: ConvNet at batch {batch}")


def check_save_load_in_a_fresh_process(target: str, workdir: Path) -> None:
    """The saved artifact loads and runs in another interpreter, which imports nothing of the model."""
    model, x = ConvNet().eval(), _images(2)
    path = _lower(target, model, (x,)).save(workdir / "artifact")
    torch.save(x, workdir / "x.pt")
    code = (f"import torch, fxdeploy\nx = torch.load({str(workdir / 'x.pt')!r})\n"
            f"torch.save(fxdeploy.load({str(path)!r})(x), {str(workdir / 'y.pt')!r})\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{target}: loading in a fresh process failed:\n{result.stderr[-2000:]}"
    with torch.no_grad():
        _close(torch.load(workdir / "y.pt"), model(x), f"{target}: the loaded artifact")


def check_bad_inputs(target: str, workdir: Path) -> None:
    """A wrong dtype, rank, size or name is an InputError naming the input, before the engine runs."""
    deployed = _lower(target, ConvNet(), (_images(2),), dynamic_shapes={"x": {0: ("batch", 1, 4)}})
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: deployed(_images(2).double()), "dtype"),
        (lambda: deployed(_images(2)[0]), "rank"),
        (lambda: deployed(_images(5)), "[1, 4]"),
        (lambda: deployed.execute({"nope": _images(2)}), "nope"),
    ]
    for call, words in cases:
        try:
            call()
        except InputError as exc:
            assert words in str(exc), f"{target}: the InputError does not say {words!r}: {exc}"
        else:
            raise AssertionError(f"{target}: a bad input ({words}) was not refused")


def check_threads(target: str, workdir: Path) -> None:
    """Calls from four threads at once give what one thread gives."""
    model = ConvNet().eval()
    deployed = _lower(target, model, (_images(2),), dynamic_shapes={"x": {0: ("batch", 1, 4)}})
    inputs = [_images(1 + k % 4, seed=k) for k in range(16)]
    want = [deployed(x) for x in inputs]
    got: dict[int, torch.Tensor] = {}

    def work(first: int) -> None:
        for k in range(first, len(inputs), 4):
            got[k] = deployed(inputs[k])

    threads = [threading.Thread(target=work, args=(first,)) for first in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for k, w in enumerate(want):
        assert k in got and torch.equal(got[k], w), f"{target}: call {k} from a thread differs from one thread's"


def check_nms_contract(target: str, workdir: Path) -> None:
    """``multiclass_nms`` gives the reference kernel's detections: same count, boxes, scores, labels."""
    generator = torch.Generator().manual_seed(0)
    corners = torch.rand(2, 64, 2, generator=generator) * 100
    boxes = torch.cat([corners, corners + 10 + torch.rand(2, 64, 2, generator=generator) * 40], -1)
    logits = torch.randn(2, 64, 4, generator=generator) * 2  # distinct scores: element-wise comparable
    model = Nms()
    want = model(boxes, logits)
    got = _lower(target, model, (boxes, logits))(boxes, logits)
    assert torch.equal(got[3], want[3]), f"{target}: num_dets {got[3].tolist()}, reference {want[3].tolist()}"
    assert torch.equal(got[2], want[2]), f"{target}: labels differ from the reference kernel's"
    for k, what in ((0, "boxes"), (1, "scores")):
        _close(got[k], want[k], f"{target}: multiclass_nms {what}")


CHECKS: tuple[Callable[[str, Path], None], ...] = (
    check_parity, check_dynamic_batch, check_save_load_in_a_fresh_process, check_bad_inputs, check_threads,
    check_nms_contract,
)
"""Every check of the suite, in the order a failure is easiest to read."""
