"""lower() under a profiler: capture watches for substituted calls with ``sys.setprofile``, and gave
a C profiler back as its object, which ``sys.setprofile`` refuses: ``python -m cProfile deploy.py``
failed with "TypeError: 'Profile' object is not callable". The profiler is active again afterwards."""

from __future__ import annotations

import cProfile
import sys

import torch

import fxdeploy
from fxdeploy.capture.substitution import Substitution, watch_calls


def _decode(x: torch.Tensor) -> torch.Tensor:
    return x * 2


class Decoding(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _decode(x.relu())


def test_a_c_profiler_is_given_back() -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        with watch_calls([Substitution(_decode, _decode)]) as watch:
            Decoding()(torch.ones(2))
        active = sys.getprofile()
    finally:
        profiler.disable()
    assert watch.hits == [Substitution(_decode, _decode).name] and active is profiler


def test_lower_under_cprofile_lowers_and_profiles() -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        deployed = fxdeploy.lower(Decoding(), (torch.randn(2, 3),), target="torchscript",
                                  substitutions={_decode: lambda x: x + x})
        active = sys.getprofile()
    finally:
        profiler.disable()
    x = torch.randn(2, 3)
    assert active is profiler and torch.equal(deployed(x), Decoding()(x))
    assert any(getattr(entry.code, "co_name", None) == "lower" for entry in profiler.getstats())
