"""torch.export's suggested fixes: applied to the declared dims, warned about, recorded, enforced."""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from fxdeploy.capture import fixes
from fxdeploy.capture.errors import explain
from fxdeploy.cli.report import render_report

REFUSAL = """Constraints violated (samples)! For more information, run with TORCH_LOGS="+dynamic".
  - Not all values of samples = L['x'].size()[1] in the specified range 20 <= samples <= 4000 satisfy \
the generated guard (L['x'].size()[1] // 20) != 1.
Suggested fixes:
  _samples = Dim('_samples', min=1, max=200)
  samples = 20*_samples

The error above occurred when calling torch.export.export."""


class Chunks(torch.nn.Module):
    """Sums chunks of 20 samples, as an audio front end's framing does: samples % 20 == 0."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], -1, 20).sum(-1)


class AtLeastThree(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._check(x.shape[0] >= 3)
        return x * 2


def test_suggested_fixes_parse_into_dims() -> None:
    assert fixes.suggested(RuntimeError(REFUSAL)) == {"_samples": "Dim('_samples', min=1, max=200)",
                                                      "samples": "20*_samples"}
    assert fixes.suggested(RuntimeError("Constraints violated (x)!")) == {}
    samples, height = torch.export.Dim("samples", min=20, max=4000), torch.export.Dim("h", max=512)
    shapes, lines = fixes.apply({"x": {1: samples}, "y": [None, height]},
                                {"_samples": "Dim('_samples', min=1, max=200)", "samples": "20*_samples", "h": "96"})
    assert str(shapes["x"][1]) == str(20 * torch.export.Dim("_samples", min=1, max=200))
    assert shapes["y"] == [None, None]  # fixed to one size: static
    assert lines == ["dim 'h' declared [0, 512] is fixed to 96 by the model (torch.export's suggested fix, applied): "
                     "the artifact takes only that size",
                     "dim 'samples' declared [20, 4000] becomes 20*_samples, torch.export's suggested fix, applied"]
    assert fixes.apply({"x": {1: samples}}, {"samples": "samples // 3"}) is None  # not understood: torch's error
    assert fixes.apply({"x": {1: samples}}, {"other": "Dim('other')"}) is None  # names no declared dim


def test_a_multiple_that_the_model_needs_is_applied_warned_recorded_and_enforced() -> None:
    model = Chunks()
    with pytest.warns(fixes.DimWarning) as warned:
        deployed = fxdeploy.lower(model, (torch.rand(2, 400),), target="onnxruntime",
                                  dynamic_shapes={"x": {0: ("batch", 1, 8), 1: ("samples", 20, 4000)}})
    messages = [str(w.message) for w in warned]
    # torch.export also raised _samples' min to 2 (its 0/1 specialization: one frame); lower()'s check
    # at the declared min (20 samples) passes, so the artifact takes it (tests/capture/test_lifted_minimums.py)
    assert messages == ["dim 'samples' declared [20, 4000] becomes 20*_samples, torch.export's suggested fix, applied"]
    assert deployed.manifest["dims"]["_samples"]["min"] == 1
    assert deployed.manifest["info"]["dim_changes"] == messages
    assert deployed.manifest["inputs"][0]["shape"] == ["batch", "20*_samples"]
    assert all(f"- {m}" in render_report(deployed) for m in messages)
    for shape in ((1, 20), (1, 60), (3, 400), (8, 4000)):
        x = torch.rand(shape)
        torch.testing.assert_close(deployed(x), model(x))
    with pytest.raises(fxdeploy.InputError, match=r"dim 1 must be 20\*_samples for an integer _samples, got 70"):
        deployed(torch.rand(2, 70))


class EvenHeight(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._assert(x.shape[2] % 2 == 0, "even height")
        return x * 2


def test_a_new_root_keeps_the_declared_range_of_the_dim_made_from_it() -> None:
    """h declared [4, 64] becomes 2*_h: _h is [2, 32], not torch's [0, 32], so an h of 2 (below
    what the deployer declared) is neither checked nor taken, and no second warning says that
    torch.export narrowed a dim nobody declared."""
    h = torch.export.Dim("h", min=4, max=64)
    shapes, _ = fixes.apply({"x": {2: h}}, {"_h": "Dim('_h', max=32)", "h": "2*_h"})
    assert str(shapes["x"][2]) == str(2 * torch.export.Dim("_h", min=2, max=32))
    with pytest.warns(fixes.DimWarning) as warned:
        deployed = fxdeploy.lower(EvenHeight(), (torch.rand(1, 3, 8, 8),), target="onnxruntime",
                                  dynamic_shapes={"x": {2: ("h", 4, 64)}})
    assert [str(w.message) for w in warned] == [
        "dim 'h' declared [4, 64] becomes 2*_h, torch.export's suggested fix, applied"]
    assert deployed.manifest["dims"]["_h"]["min"] == 2
    with pytest.raises(fxdeploy.InputError, match=r"_h must be in \[2, 32\]"):
        deployed(torch.rand(1, 3, 2, 8))
    torch.testing.assert_close(deployed(torch.rand(1, 3, 64, 8)).shape, torch.Size([1, 3, 64, 8]))


def test_a_minimum_the_model_checks_narrows_the_range_and_calls_below_it_are_refused() -> None:
    with pytest.warns(fixes.DimWarning, match=r"dim 'batch' declared \[1, 8\] becomes .*\(\[3, 8\]\)"):
        deployed = fxdeploy.lower(AtLeastThree(), (torch.rand(4, 3),), target="onnxruntime",
                                  dynamic_shapes={"x": {0: ("batch", 1, 8)}})
    assert deployed.manifest["dims"]["batch"]["min"] == 3
    with pytest.raises(fxdeploy.InputError, match=r"dim 0 \(batch\) must be in \[3, 8\], got 2"):
        deployed(torch.rand(2, 3))


class SmallBatchesOnly(torch.nn.Module):
    """A branch on the batch size: torch.export suggests ``Dim('batch', max=4)``, with no min."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x * 2 if x.shape[0] > 4 else x)


def test_a_maximum_the_model_needs_keeps_the_declared_minimum() -> None:
    """The fix's range met with the declared one: [1, 4], where the fix alone gave [0, 4] and an
    empty batch was accepted."""
    assert str(fixes.apply({"x": {0: torch.export.Dim("b", min=1, max=16)}}, {"b": "Dim('b', max=4)"})[0]["x"][0]) \
        == str(torch.export.Dim("b", min=1, max=4))
    assert fixes.apply({"x": {0: torch.export.Dim("b", min=6, max=16)}}, {"b": "Dim('b', max=4)"}) is None
    model = SmallBatchesOnly().eval()
    for target in ("onnxruntime", "torchscript"):  # the second lowering replays the first trace's failure
        with pytest.warns(fixes.DimWarning, match=r"dim 'b' declared \[1, 16\] becomes .*\(\[1, 4\]\)"):
            deployed = fxdeploy.lower(model, (torch.rand(2, 16),), target=target,
                                      dynamic_shapes={"x": {0: ("b", 1, 16)}})
        assert deployed.manifest["dims"]["b"] == {"min": 1, "opt": 2, "max": 4}
        with pytest.raises(fxdeploy.InputError, match=r"dim 0 \(b\) must be in \[1, 4\], got 0"):
            deployed(torch.rand(0, 16))
        x = torch.rand(4, 16)
        torch.testing.assert_close(deployed(x), model(x))


def test_a_refusal_carries_torchs_guards_and_suggested_fixes() -> None:
    text = explain(RuntimeError(REFUSAL), Chunks(), [])
    assert "torch.export: Not all values of samples" in text and "generated guard" in text
    fix = "      _samples = Dim('_samples', min=1, max=200)"
    assert f"torch.export's suggested fixes (for dynamic_shapes):\n{fix}" in text
    assert "      samples = 20*_samples" in text


def test_a_refusal_names_only_the_substitutions_that_could_apply() -> None:
    """fxdeploy's own TransformerEncoder substitution was named under every refusal, a CNN's too."""
    from fxdeploy.capture.substitution import Substitution

    encoder = Substitution(torch.nn.TransformerEncoder.forward, lambda *a: None)
    layer = torch.nn.TransformerEncoderLayer(8, 2)
    assert "substitutions active" not in explain(RuntimeError(REFUSAL), Chunks(), [encoder])
    assert "substitutions active during this capture: torch.nn.modules.transformer.TransformerEncoder.forward" in \
        explain(RuntimeError(REFUSAL), torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False), [encoder])
