"""The real-architecture sweep (examples/sweep.py) on every target: each pair matches eager at
batch 1 and 3 and at two sizes (<= 1e-4 relative; 1e-3 on ncnn), or is refused with an
``FxDeployError`` that names the op, dim or guard and what to do. Nothing raw escapes.

``make test`` runs the ``zoo_fast`` pairs (one per workaround: the guards, the given-back min, the
whole-input pool, the contiguous reshapes, token ids and a padding mask on ncnn, the ops ncnn gets
wrong found by bisection (and the layer the report names), a size pnnx cannot keep dynamic, the newer
families on ncnn, OWL-ViT's text queries on ncnn); ``make zoo``
runs all 60.
benchmarks/sweep.py puts plain ``torch.onnx.export`` beside the same pairs (benchmarks/README.md).
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

import fxdeploy
from examples.sweep import SWEEP, worst_relative_error
from fxdeploy.capture.fixes import DimWarning
from fxdeploy.errors import FxDeployError
from fxdeploy.lowering.ncnn_bisect import DIFFERS
from tests.helpers import require_target

TARGETS = ["onnxruntime", "openvino", "torchscript", "ncnn"]
TOLERANCE = {"ncnn": 1e-3}
FAST = {("bert", "ncnn"), ("dinov2", "ncnn"), ("dinov2", "onnxruntime"), ("segresnet", "openvino"),
        ("efficientnet", "openvino"), ("wav2vec2", "torchscript"), ("segresnet", "ncnn"), ("swin", "onnxruntime"),
        ("wav2vec2", "ncnn"), ("distilbert", "ncnn"), ("whisper_encoder", "ncnn"), ("detr", "ncnn"),
        ("unet3d", "ncnn"), ("convnext", "ncnn"), ("gpt2", "onnxruntime"), ("owlvit", "ncnn")}
_EXPORT_TARGETS = ("onnxruntime", "openvino", "torchscript")

REFUSED: dict[tuple[str, str], tuple[str, ...]] = {
    # pnnx fails at a second size: lowered at the example's 56 x 56 (a DimWarning), other sizes refused by name
    ("dinov2", "ncnn"): ("dim 2 must be 56",),
    ("swin", "ncnn"): ("pnnx left op(s) that ncnn cannot run: Tensor.reshape", "another target"),
    # GPT-2's causal mask at a dynamic length (a comparison of aranges): ops pnnx leaves, with a
    # pnnx.Expression the host fallback cannot map
    ("gpt2", "ncnn"): ("pnnx left op(s) that ncnn cannot run", "torch.where"),
    # torch.export makes W = H one dim, from DINOv2's shortcut at its configured size (a guard): a
    # 42 x 70 image is refused by name; 56 x 56 runs (the guards: tests/capture/test_guards.py)
    **{("dinov2", t): ("but input 'x' has h = 3; they must be equal",) for t in _EXPORT_TARGETS},
    # transformers' TF-style padding fixes H and W to the example's 96 (torch.export's suggested fix,
    # applied with a DimWarning); 128 x 80 is refused by name
    **{("mobilenet_v2", t): ("dim 2 must be 96",) for t in (*_EXPORT_TARGETS, "ncnn")},
}
"""(model, target) -> what the refusal must say; every other pair must match eager."""
SAID = {
    ("mobilenet_v2", "*"): "is fixed to 96 by the model",
    ("dinov2", "ncnn"): "fixed at the example's 56: ncnn: pnnx failed",
}
"""(model, target or "*") -> the DimWarning lower() gives before the refusal: torch's fix, a size pnnx fixed."""
BISECTED = {("segresnet", "ncnn"): ("upsample_trilinear3d", "Interp")}
"""(model, target) -> (an op the bisection sent to the host, the ncnn layer the report names for it)."""
ON_THE_ENGINE = {("wav2vec2", "ncnn")}
"""Pairs with no op on the host: wav2vec2's slice of its positional convolution's trailing pad, along its
dynamic length, which pnnx dropped as a no-op (the bisection sent it to the host) until ``dynamic_slices``."""


def _cases() -> list[object]:
    return [
        pytest.param(name, target, marks=[pytest.mark.zoo, *([pytest.mark.zoo_fast] if (name, target) in FAST else [])],
                     id=f"{name}-{target}")
        for name in SWEEP for target in TARGETS
    ]


_BUILT: dict[str, tuple[Any, Any]] = {}


def _built(name: str) -> tuple[Any, Any]:
    """The model and inputs of ``name``, one object for its targets' cases (which run one after the
    other): each lowering after the first starts from its capture (fxdeploy.capture.memo), as in a
    user's process. One model is kept at a time."""
    if name not in _BUILT:
        _BUILT.clear()
        _BUILT[name] = SWEEP[name].factory()
    return _BUILT[name]


@pytest.mark.parametrize(("name", "target"), _cases())
def test_sweep_pair_matches_eager_or_is_refused_by_name(name: str, target: str) -> None:
    require_target(target)
    entry = SWEEP[name]
    model, inputs = _built(name)
    expected = REFUSED.get((name, target))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            deployed = fxdeploy.lower(model, inputs, target=target, dynamic_shapes=entry.dynamic_shapes)
            error = worst_relative_error(name, model, deployed)
        except FxDeployError as exc:
            if expected is None:
                raise
            assert all(part in str(exc) for part in expected), f"the refusal does not say {expected}: {exc}"
            said = SAID.get((name, target), SAID.get((name, "*")))
            if said is not None:  # at lower() time
                assert any(issubclass(w.category, DimWarning) and said in str(w.message) for w in caught)
            return
    assert expected is None, f"expected a refusal saying {expected}, but it matched eager ({error:.2g})"
    assert error <= TOLERANCE.get(target, 1e-4), f"worst relative error {error:.3g}"
    if (name, target) in ON_THE_ENGINE:
        assert "unconverted_on_host" not in deployed.manifest["info"], deployed.manifest["info"]["unconverted_on_host"]
    if (name, target) in BISECTED:  # the report says which op ncnn got wrong, where, and its layer
        op, layer = BISECTED[name, target]
        moved = deployed.manifest["info"]["unconverted_on_host"]["ops"]
        assert any(key.startswith(op) and DIFFERS in why and f"ncnn layer {layer} " in why
                   for key, why in moved.items()), moved
