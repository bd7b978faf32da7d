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


CASES = {
    # model output is the substituted function's result: a dict silently becomes a tuple
    "function_tuple_for_dict": (ReturnsPost, LIB.post, tuple_instead_of_dict),
    # one tensor fewer: fails in a pass, without naming the substitution
    "function_missing_key": (ReturnsPost, LIB.post, one_tensor_instead_of_two),
    # model code indexes the result: capture fails on the user's line, naming the substitution
    "function_result_indexed": (UsesPost, LIB.post, tuple_instead_of_dict),
    # a method substitution runs in the eager pass too, so the mismatch surfaces there
    "method_tuple_for_dict": (LIB.Head, LIB.Head.post, method_tuple_instead_of_dict),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_wrong_structure_fails_in_lower_naming_the_substitution(case: str) -> None:
    model_type, original, replacement = CASES[case]
    name = f"{original.__module__}.{original.__qualname__}"
    x = torch.randn(3, 4)
    with pytest.raises(fxdeploy.FxDeployError) as info:
        fxdeploy.lower(model_type(), (x,), substitutions={original: replacement})
    assert name in str(info.value), str(info.value)
    if case.startswith("function_") and case != "function_result_indexed":
        assert "output structure" in str(info.value), str(info.value)


def test_structure_message_shows_both_structures() -> None:
    with pytest.raises(fxdeploy.FxDeployError, match=r"eager returns \{'pos': T, 'n': T\}.*returns \(T, T\)"):
        fxdeploy.lower(ReturnsPost(), (torch.randn(3, 4),), substitutions={LIB.post: tuple_instead_of_dict})


def test_unpack_allows_another_structure() -> None:
    """With unpack, the substitution promises to rebuild eager's structure on the host."""
    sub = fxdeploy.Substitution(LIB.post, tuple_instead_of_dict,
                                unpack=lambda out: {"pos": out[0][out[0] > 0], "n": out[1]})
    x = torch.randn(3, 4)
    deployed = fxdeploy.lower(ReturnsPost(), (x,), substitutions={LIB.post: sub})
    out = deployed(x)
    assert torch.equal(out["n"], (x + 1 > 0).sum())
