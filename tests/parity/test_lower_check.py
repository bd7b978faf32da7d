"""Dynamic shapes are verified at min, opt and max after lowering; a mismatch names the shapes."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import fxdeploy
from fxdeploy.capture.fixes import DimWarning
from fxdeploy.errors import UnverifiedWarning
from fxdeploy.runtime.executor import Executor
from fxdeploy.targets import _TARGETS, Target, register_target
from fxdeploy.targets import onnxruntime as ort_target
from tests.helpers import ROOT, require_target


class Resizer(torch.nn.Module):
    """Dynamic batch and dynamic H/W: a conv net with global pooling and a resize."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        features = torch.relu(self.conv(x))
        small = torch.nn.functional.interpolate(features, scale_factor=0.5, mode="bilinear")
        return {"logits": self.head(features.mean((2, 3))), "small": small}


def test_dynamic_batch_and_hw_pass_min_opt_max_checks() -> None:
    model = Resizer().eval()
    x = torch.randn(2, 3, 32, 48)
    shapes = {"x": {0: ("batch", 1, 2, 4), 2: ("height", 16, 32, 64), 3: ("width", 16, 48, 96)}}
    deployed = fxdeploy.lower(model, (x,), dynamic_shapes=shapes)
    checks = deployed.manifest["info"]["shape_checks"]
    assert [c["label"] for c in checks] == ["example", "min", "opt", "max"]
    assert checks[1]["shapes"] == [[1, 3, 16, 16]] and checks[3]["shapes"] == [[4, 3, 64, 96]]
    assert all(c["max_abs_error"] <= 1e-4 for c in checks)
    assert deployed.manifest["dims"] == {
        "batch": {"min": 1, "opt": 2, "max": 4},
        "height": {"min": 16, "opt": 32, "max": 64},
        "width": {"min": 16, "opt": 48, "max": 96},
    }
    out = deployed(torch.randn(3, 3, 40, 20))
    assert out["small"].shape == (3, 8, 20, 10)


class FloorDivides(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a // b, torch.remainder(a, b)


def test_integer_inputs_at_other_sizes_take_the_examples_values() -> None:
    """The divisor's example has no 0 (its range, [-3, 4], has): the inputs made for the min,
    opt and max checks draw integers from the example's values, so eager runs there too."""
    a = torch.tensor([[7, -7, 7, -7, 0, 5, -5, 9]] * 2)
    b = torch.tensor([[2, 2, -2, -2, 3, -3, 3, 4]] * 2)
    batch = ("batch", 1, 8)
    deployed = fxdeploy.lower(FloorDivides(), (a, b), target="onnxruntime", dynamic_shapes={"a": {0: batch},
                                                                                            "b": {0: batch}})
    checks = deployed.manifest["info"]["shape_checks"]
    assert [c["label"] for c in checks] == ["example", "min", "opt", "max"] and checks[3]["shapes"][0] == [8, 8]
    assert all(c["max_abs_error"] == 0 for c in checks)
    x, y = a.repeat(3, 1)[:5], b.repeat(3, 1)[:5].flip(1)
    torch.testing.assert_close(deployed(x, y), FloorDivides()(x, y))


def test_masks_at_other_sizes_are_drawn_like_the_examples() -> None:
    """A bool input, or a float one of two values, is a mask: each value about as often as in the
    example, and never under 1 in 8 (an all-False example still draws some True). A float input of
    more values is drawn over its range."""
    from fxdeploy.parity.verify import resized

    padding = torch.arange(10) >= torch.tensor([[10], [8], [7], [9]])  # 6 of 40 True
    additive = torch.zeros(4, 10).masked_fill(padding, float("-inf"))
    ramp = torch.linspace(-1, 1, 40).view(4, 10)
    drawn = resized([padding, additive, torch.zeros(4, 10, dtype=torch.bool), ramp], [["b", 10]] * 4, {"b": 64}, 0)
    assert 0.1 < drawn[0].double().mean() < 0.2 and drawn[0].dtype == torch.bool
    assert set(drawn[1].unique().tolist()) == {0.0, float("-inf")} and 0.1 < drawn[1].isinf().double().mean() < 0.2
    assert 0.08 < drawn[2].double().mean() < 0.17
    assert drawn[3].unique().numel() > 100 and -1 <= drawn[3].min() and drawn[3].max() <= 1


class ChecksItsBatchEagerly(torch.nn.Module):
    """Validates its input in eager only, as models do to guard a service: capture skips it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_compiling() and x.shape[0] > 4:
            raise ValueError(f"at most 4 images, got {x.shape[0]}")
        return x * 2


def test_a_model_that_raises_at_a_checked_size_is_named_with_the_shapes() -> None:
    with pytest.raises(fxdeploy.LoweringError) as caught:
        fxdeploy.lower(ChecksItsBatchEagerly(), (torch.rand(2, 3),), target="onnxruntime",
                       dynamic_shapes={"x": {0: ("batch", 1, 8)}})
    message = str(caught.value)
    assert "the model raised ValueError: at most 4 images, got 8" in message
    assert "[[8, 3]]" in message and "narrow the dims" in message


class BakedBatch(torch.nn.Module):
    """Shape-specialized: reshapes with the example's batch size baked in."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(2, -1).sum(-1)


def test_shape_specialized_model_fails_naming_the_dim() -> None:
    with pytest.raises(fxdeploy.CaptureError, match=r"batch.*specialized|specialized.*batch"):
        fxdeploy.lower(BakedBatch(), (torch.randn(2, 3),), dynamic_shapes={"x": {0: ("batch", 1, 8)}})


class Letterbox(torch.nn.Module):
    """Resizes the longer side to 64, by a float ratio (``integer``: by integer arithmetic)."""

    def __init__(self, integer: bool) -> None:
        super().__init__()
        self.integer = integer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        if self.integer:
            size = (h * 64 // max(h, w), w * 64 // max(h, w))
        else:
            r = 64 / max(h, w)
            size = (int(round(h * r)), int(round(w * r)))
        return torch.nn.functional.interpolate(x, size=size, mode="bilinear")


def test_a_size_fixed_at_the_example_by_python_numbers_is_refused_with_the_way_out() -> None:
    """torch.export keeps h and w dynamic but bakes int(round(h * r)) in with no guard: the check
    finds the artifact's size stuck at the example's and says how to compute it instead."""
    x, dims = torch.rand(1, 4, 96, 80), {"x": {2: ("h", 64, 128), 3: ("w", 64, 128)}}
    with pytest.raises(fxdeploy.LoweringError, match=r"\(1, 4, 64, 53\).*kept the size it had at the example.*"
                       r"integer arithmetic.*static"):
        fxdeploy.lower(Letterbox(integer=False), (x,), dynamic_shapes=dims)
    deployed = fxdeploy.lower(Letterbox(integer=True), (x,), dynamic_shapes=dims)
    for shape in [(1, 4, 64, 64), (1, 4, 128, 100)]:
        y = torch.rand(shape)
        torch.testing.assert_close(deployed(y), Letterbox(integer=False)(y), atol=1e-5, rtol=0)


class _WrongAtOtherSizes(Executor):
    """An engine that is right only at the example batch size, as a broken lowering would be."""

    def __init__(self, inner: Executor, good_batch: int) -> None:
        super().__init__()
        self.inner, self.good_batch = inner, good_batch

    def run(self, feeds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = self.inner.execute(feeds)
        batch = next(iter(feeds.values())).shape[0]
        return out if batch == self.good_batch else {k: v + 1 for k, v in out.items()}


def test_a_wrong_engine_at_max_batch_is_an_error_naming_the_shape() -> None:
    def load(directory: Path, manifest: dict[str, Any], settings: fxdeploy.Settings) -> Executor:
        return _WrongAtOtherSizes(ort_target.load(directory, manifest, settings), good_batch=2)

    broken = Target(
        name="test-broken", pipeline=ort_target.TARGET.pipeline, lower=ort_target.lower_onnx, load=load,
        version=ort_target.version, install_hint="(test only)",
    )
    register_target(broken)
    try:
        with pytest.raises(fxdeploy.LoweringError, match=r"at the min input shapes \[\(1, 4\)\].*differs from eager"):
            fxdeploy.lower(torch.nn.Linear(4, 3), (torch.randn(2, 4),), target="test-broken",
                           dynamic_shapes={"input": {0: ("batch", 1, 8)}})
    finally:
        _TARGETS.pop("test-broken")


class Patches(torch.nn.Module):
    """Folds H and W into 32x32 patches: only multiples of 32 work, a derived dim (32 * Dim)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        b, c, h, w = y.shape
        return y.reshape(b, c, h // 32, 32, w // 32, 32).mean((3, 5))


@pytest.fixture(scope="module")
def patches() -> tuple[torch.nn.Module, fxdeploy.Deployed]:
    h, w = torch.export.Dim("h", min=2, max=6), torch.export.Dim("w", min=2, max=6)
    model = Patches().eval()
    x = torch.randn(2, 3, 64, 96)
    return model, fxdeploy.lower(model, (x,), dynamic_shapes={"x": {0: "batch", 2: 32 * h, 3: 32 * w}})


def test_derived_dims_are_recorded_checked_and_run(patches) -> None:
    model, deployed = patches
    assert deployed.manifest["inputs"][0]["shape"] == ["batch", 3, "32*h", "32*w"]
    assert {k: v for k, v in deployed.manifest["dims"].items() if k != "batch"} == {
        "h": {"min": 2, "opt": 2, "max": 6}, "w": {"min": 2, "opt": 3, "max": 6},
    }
    checks = deployed.manifest["info"]["shape_checks"]
    assert checks[1]["shapes"] == [[1, 3, 64, 64]] and checks[3]["shapes"][0][2:] == [192, 192]
    x = torch.randn(3, 3, 160, 64)
    with torch.no_grad():
        assert (deployed(x) - model(x)).abs().max() <= 1e-4


@pytest.mark.parametrize(("size", "message"), [
    (100, r"dim 2 must be 32\*h for an integer h, got 100"),
    (224, r"dim 2 \(32\*h\) is 224, so h = 7; h must be in \[2, 6\]"),
])
def test_derived_dim_outside_its_range_is_refused(patches, size: int, message: str) -> None:
    _, deployed = patches
    with pytest.raises(fxdeploy.InputError, match=message):
        deployed(torch.randn(1, 3, size, 64))


def test_derived_dims_survive_save_and_load(patches, tmp_path: Path) -> None:
    model, deployed = patches
    loaded = fxdeploy.load(deployed.save(tmp_path / "art"))
    x = torch.randn(2, 3, 96, 128)
    with torch.no_grad():
        assert (loaded(x) - model(x)).abs().max() <= 1e-4
    with pytest.raises(fxdeploy.InputError, match=r"32\*h"):
        loaded(torch.randn(2, 3, 100, 128))


@pytest.mark.parametrize("entry", ["0*h", "h*h", "32 h", "-h"])
def test_malformed_dim_in_a_manifest_is_refused_on_load(patches, tmp_path: Path, entry: str) -> None:
    import json

    _, deployed = patches
    path = deployed.save(tmp_path / "art")
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["inputs"][0]["shape"][2] = entry
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(fxdeploy.ArtifactError, match="input 'x'"):
        fxdeploy.load(path)


def test_ncnn_takes_a_dynamic_height_and_width() -> None:
    """pnnx gets a second input size and keeps H/W symbolic; min, opt and max match eager."""
    require_target("ncnn")
    model = Resizer().eval()
    x = torch.randn(2, 3, 32, 48)
    shapes = {"x": {0: ("batch", 1, 2, 4), 2: ("height", 16, 32, 64), 3: ("width", 16, 48, 96)}}
    deployed = fxdeploy.lower(model, (x,), target="ncnn", dynamic_shapes=shapes)
    checks = deployed.manifest["info"]["shape_checks"]
    assert [c["shapes"][0] for c in checks[1:]] == [[1, 3, 16, 16], [2, 3, 32, 48], [4, 3, 64, 96]]
    assert all(c["max_abs_error"] <= 1e-3 for c in checks)
    x = torch.randn(3, 3, 40, 24)
    with torch.no_grad():
        want = model(x)
    got = deployed(x)
    assert got["small"].shape == want["small"].shape == (3, 8, 20, 12)
    assert max((got[k] - want[k]).abs().max() for k in want) <= 1e-3


class Sliced(torch.nn.Module):
    """Adds a position table cut to the input size: an aten.slice by a symbolic size, which the
    tracer recorded as a constant until traceable_sizes respelled it as Python indexing."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(1, 3, 256, 256))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.table[:, :, : x.shape[2], : x.shape[3]]


def test_ncnn_takes_a_slice_by_the_input_size() -> None:
    require_target("ncnn")
    model = Sliced().eval()
    shapes = {"x": {0: "batch", 2: ("height", 32, 128), 3: ("width", 32, 128)}}
    deployed = fxdeploy.lower(model, (torch.randn(2, 3, 64, 64),), target="ncnn", dynamic_shapes=shapes)
    x = torch.randn(1, 3, 96, 40)
    with torch.no_grad():
        torch.testing.assert_close(deployed(x), model(x), rtol=1e-3, atol=1e-4)


class Padded(torch.nn.Module):
    """Pads H by its own size, then folds the two halves into channels: a pad by a symbolic amount,
    which the tracer records as a constant (traceable_sizes does not respell ``constant_pad_nd``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        doubled = torch.nn.functional.pad(x, [0, 0, 0, x.shape[2]])
        return doubled.reshape(x.shape[0], 2 * x.shape[1], x.shape[2], x.shape[3]) * 2.0


def test_ncnn_lowers_at_the_example_size_where_pnnx_cannot_keep_it_dynamic_and_says_so() -> None:
    """The pad's amount, computed from H, is a number the trace fixes (pnnx aborted re-running the trace at
    a second size; lowering/ncnn_sizes.py finds it first): lower() lowers again with H and W fixed at
    the example's, warns once per dim, records it, and the artifact refuses other sizes by name."""
    require_target("ncnn")
    model = Padded().eval()
    shapes = {"x": {0: "batch", 2: ("height", 32, 128), 3: ("width", 32, 128)}}
    said_why = r"dim '(height|width)' fixed at the example's 64: ncnn: aten\.pad\.default .* as a number"
    with pytest.warns(DimWarning, match=said_why) as said:
        deployed = fxdeploy.lower(model, (torch.randn(2, 3, 64, 64),), target="ncnn", dynamic_shapes=shapes)
    assert sorted(str(w.message).split("'")[1] for w in said if w.category is DimWarning) == ["height", "width"]
    assert {w.filename for w in said if w.category is DimWarning} == {__file__}  # the line that called lower()
    assert deployed.manifest["inputs"][0]["shape"] == ["batch", 3, 64, 64]
    assert any("aten.pad.default" in line for line in deployed.manifest["info"]["dim_changes"])
    for batch in (1, 3):
        x = torch.randn(batch, 3, 64, 64)
        with torch.no_grad():
            torch.testing.assert_close(deployed(x), model(x), rtol=1e-4, atol=1e-4)
    with pytest.raises(fxdeploy.InputError, match=r"input 'x': dim 2 must be 64.*got 96"):
        deployed(torch.randn(1, 3, 96, 64))


def test_ncnn_names_what_it_cannot_hold_in_a_dynamic_graph(patches) -> None:
    """Patches reshapes to rank 6 with sizes computed from H and W: pnnx keeps the dynamic reshape,
    which ncnn (at most 4 dims per image) cannot run; lower() names the layers."""
    require_target("ncnn")
    model, _ = patches
    h, w = torch.export.Dim("h", min=2, max=6), torch.export.Dim("w", min=2, max=6)
    with pytest.raises(fxdeploy.LoweringError, match=r"target 'ncnn'.*pnnx left op\(s\).*Tensor\.reshape"):
        fxdeploy.lower(model, (torch.randn(2, 3, 64, 96),), target="ncnn",
                       dynamic_shapes={"x": {0: "batch", 2: 32 * h, 3: 32 * w}})


def test_an_unchecked_artifact_says_so_on_load_and_in_the_cli(tmp_path: Path) -> None:
    """The subject is the flag: verify=False is the user's choice, recorded and warned about."""
    from examples.models import convnet

    model, (x,) = convnet()
    path = fxdeploy.lower(model, (x,), settings=fxdeploy.Settings(verify=False)).save(tmp_path / "unchecked")
    assert json.loads((path / "manifest.json").read_text())["info"]["verified"] is False
    with pytest.warns(UnverifiedWarning, match="lowered with verify=False"):
        fxdeploy.load(path)
    result = subprocess.run([sys.executable, "-m", "fxdeploy.cli", "run", str(path), "--runs", "1"],
                            capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    warning_lines = [line for line in result.stderr.splitlines() if "verify=False" in line]
    assert len(warning_lines) == 1 and warning_lines[0].startswith("fxdeploy: warning:"), result.stderr
    checked = fxdeploy.lower(model, (x,)).save(tmp_path / "checked")
    assert json.loads((checked / "manifest.json").read_text())["info"]["verified"] is True
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnverifiedWarning)
        fxdeploy.load(checked)
