"""Substitutions apply only during capture; library functions and classes are never replaced."""

from __future__ import annotations

import sys
import types

import pytest
import torch

import fxdeploy
from fxdeploy.capture import capture, substitution
from fxdeploy.errors import CaptureError, RegistryError
from fxdeploy.settings import CaptureSettings, Settings


def _library() -> types.ModuleType:
    """A stand-in third-party module with data-dependent postprocessing."""
    module = types.ModuleType("fake_detlib")
    exec(  # noqa: S102 - builds a real module object so the function has real globals
        "import torch\n"
        "def postprocess(x):\n"
        "    keep = x > 0\n"
        "    return x[keep]\n"
        "class Head(torch.nn.Module):\n"
        "    def postprocess(self, x):\n"
        "        return x[x > 0]\n"
        "    def forward(self, x):\n"
        "        return self.postprocess(x * 2)\n",
        module.__dict__,
    )
    sys.modules["fake_detlib"] = module
    return module


class CallsFunction(torch.nn.Module):
    def __init__(self, lib: types.ModuleType) -> None:
        super().__init__()
        self.lib = lib

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lib.postprocess(x + 1)


def _tensor_only(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x > 0, x, torch.zeros_like(x))


def _method_tensor_only(self: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return torch.where(x > 0, x, torch.zeros_like(x))


def test_function_substitution_applies_in_capture_only() -> None:
    lib = _library()
    original = lib.postprocess
    x = torch.randn(3, 4)
    subs = [substitution.Substitution(lib.postprocess, _tensor_only)]
    captured = capture(CallsFunction(lib), (x,), substitutions=subs)
    assert captured.mode == "strict" and captured.substitutions == ["fake_detlib.postprocess"]
    (out,) = captured.graph_module(x)
    assert torch.equal(out, _tensor_only(x + 1))
    assert lib.postprocess is original
    assert torch.equal(CallsFunction(lib)(x), (x + 1)[(x + 1) > 0])  # eager unchanged
    # dynamo's polyfill table is clean again: a strict export now traces the original function
    ep = torch.export.export(CallsFunction(lib), (x,), strict=True)
    assert any(n.target is torch.ops.aten.index.Tensor for n in ep.graph.nodes)


def test_method_substitution_touches_instances_not_the_class() -> None:
    lib = _library()
    head = lib.Head()
    original = lib.Head.postprocess
    x = torch.randn(3, 4)
    subs = [substitution.Substitution(lib.Head.postprocess, _method_tensor_only)]
    captured = capture(head, (x,), substitutions=subs)
    assert captured.mode == "non_strict"
    assert torch.equal(captured.graph_module(x)[0], _tensor_only(x * 2))
    assert lib.Head.postprocess is original and "postprocess" not in head.__dict__
    assert torch.equal(head(x), (x * 2)[(x * 2) > 0])


def test_state_restored_after_a_failed_capture() -> None:
    lib = _library()
    head = lib.Head()

    def broken(self: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("replacement is broken")

    subs = [substitution.Substitution(lib.Head.postprocess, broken)]
    with pytest.raises(CaptureError):
        capture(head, (torch.randn(2, 2),), substitutions=subs)
    assert "postprocess" not in head.__dict__
    x = torch.randn(3, 4)
    assert torch.equal(head(x), (x * 2)[(x * 2) > 0])


def test_registry_rejects_duplicates_and_lower_uses_registered_substitutions() -> None:
    lib = _library()
    fxdeploy.substitute(lib.postprocess)(_tensor_only)
    try:
        with pytest.raises(RegistryError, match="already registered"):
            fxdeploy.substitute(lib.postprocess)(_tensor_only)
        x = torch.randn(2, 5)
        # the stand-in replacement pads where postprocess compacts: lower()'s check against the model
        # itself would refuse it (tests/e2e/test_wrong_substitution.py), so it is off here
        deployed = fxdeploy.lower(CallsFunction(lib), (x,), settings=Settings(verify=False))
        assert torch.allclose(deployed(x), _tensor_only(x + 1))
        assert deployed.manifest["info"]["substitutions"] == ["fake_detlib.postprocess"]
    finally:
        substitution.unregister(lib.postprocess)


def test_capture_failure_names_the_line_and_suggests_a_substitution() -> None:
    lib = _library()
    settings = Settings(capture=CaptureSettings(mode="strict"))

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
            scores = x.sum(-1)
            keep = torch.nonzero(scores > 0).squeeze(-1)
            if scores.sum() > 2:  # a branch on a value: cannot be captured
                return [x[keep]]
            return [x]

    with pytest.raises(CaptureError) as info:
        capture(Model(), (torch.randn(6, 4),), settings=settings)
    message = str(info.value)
    assert "test_substitution.py" in message and "in forward()" in message
    assert "if scores.sum() > 2" in message
    assert "@fxdeploy.substitute(" in message
    del lib


class SeesHooks(torch.nn.Module):
    """Records the thread's profile hook each time its forward runs (eagerly, then traced)."""

    def __init__(self) -> None:
        super().__init__()
        self.hooks: list[object] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.hooks.append(sys.getprofile())
        return x.relu() + 1


def test_a_function_the_model_does_not_call_is_not_watched_in_the_trace() -> None:
    """The watch is a profile hook on every call, which makes a non-strict trace take about twice
    its time: the traces watch only the substituted functions the eager run called (here none)."""
    lib = _library()
    model = SeesHooks()
    subs = [substitution.Substitution(lib.postprocess, _tensor_only)]
    captured = capture(model, (torch.randn(3, 4),), substitutions=subs)
    assert captured.mode == "non_strict" and captured.substitutions == []
    assert len(model.hooks) >= 2 and model.hooks[0] is not None  # eager: watched
    assert all(hook is None for hook in model.hooks[1:]), model.hooks  # the traces: nothing watched
