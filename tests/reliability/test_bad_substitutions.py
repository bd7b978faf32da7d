"""A substitution whose replacement returns another structure than the original must fail in lower().

Found otherwise only at run time (or never: a dict silently becoming a tuple), the mistake
reaches the deployer instead of the author. Each case wants an FxDeployError from lower() that
names the substitution.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

import fxdeploy


def _library() -> types.ModuleType:
    """A stand-in third-party module whose postprocess returns a dict of data-dependent tensors."""
    module = types.ModuleType("reliability_detlib")
    exec(  # noqa: S102 - a real module object, so the function has real globals and a real name
        "import torch\n"
        "def post(x):\n"
        "    return {'pos': x[x > 0], 'n': (x > 0).sum()}\n"
        "class Head(torch.nn.Module):\n"
        "    def post(self, x):\n"
        "        return {'pos': x[x > 0], 'n': (x > 0).sum()}\n"
        "    def forward(self, x):\n"
        "        return self.post(x * 2)['n'] + 1\n",
        module.__dict__,
    )
    sys.modules[module.__name__] = module
    return module


LIB = _library()


class ReturnsPost(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return LIB.post(x + 1)


class UsesPost(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return LIB.post(x + 1)["n"] * 2


def tuple_instead_of_dict(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.where(x > 0, x, 0.0), (x > 0).sum()


def one_tensor_instead_of_two(x: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"pos": torch.where(x > 0, x, 0.0)}


def method_tuple_instead_of_dict(self: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.where(x > 0, x, 0.0), (x > 0).sum()


CAPTURE = "fxdeploy/capture.py capture(): the exported out_spec is never compared with the eager output's structure"
CASES = {
    # model output is the substituted function's result: a dict silently becomes a tuple
    "function_tuple_for_dict": (ReturnsPost, LIB.post, tuple_instead_of_dict, CAPTURE),
    # one tensor fewer: fails in a pass, without naming the substitution
    "function_missing_key": (
        ReturnsPost, LIB.post, one_tensor_instead_of_two,
        CAPTURE + " (tensorize_outputs then fails with '2 output names for 1 graph outputs')",
    ),
    # model code indexes the result: capture fails on the user's line, naming the substitution
    "function_result_indexed": (UsesPost, LIB.post, tuple_instead_of_dict, None),
    # a method substitution runs in the eager pass too, so the mismatch surfaces there
    "method_tuple_for_dict": (LIB.Head, LIB.Head.post, method_tuple_instead_of_dict, None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_wrong_structure_fails_in_lower_naming_the_substitution(case: str, request) -> None:
    model_type, original, replacement, gap = CASES[case]
    if gap is not None:
        request.applymarker(pytest.mark.xfail(strict=True, reason=gap))
    name = f"{original.__module__}.{original.__qualname__}"
    x = torch.randn(3, 4)
    with pytest.raises(fxdeploy.FxDeployError) as info:
        fxdeploy.lower(model_type(), (x,), substitutions={original: replacement})
    assert name in str(info.value), str(info.value)
