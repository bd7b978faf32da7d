"""``F.logsigmoid`` (``fxdeploy/lowering/onnx_translations/log_sigmoid.py``) as torch computes it: torch.onnx's
``Log(Sigmoid(x))`` gave -inf below about -88 (torch: x itself) and 0 above about 17 (torch: -exp(-x)); lower()'s
check refused it where the example held such values and passed it where it did not."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import fxdeploy
from tests.helpers import require_target


class LogProbabilities(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return F.logsigmoid(x), F.logsigmoid(-x.half())


def _values() -> torch.Tensor:
    """Ordinary logits, the ranges where the sigmoid rounds to 0 or 1, the signed zeros, infinities and NaN."""
    special = torch.tensor([0.0, -0.0, 1e-9, -1e-9, 0.3, -0.3, 3.4, 3.5, 15.0, 17.0, 20.0, 40.0, 87.0, 89.0, 104.0,
                            -20.0, -40.0, -87.0, -89.0, -100.0, -1e3, 1e3, float("inf"), float("-inf"), float("nan")])
    logits = torch.randn(231, generator=torch.Generator().manual_seed(0)) * 30
    return torch.cat([special, logits]).reshape(2, 128)


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_logsigmoid_keeps_torchs_values_where_the_sigmoid_rounds(target: str) -> None:
    require_target(target)
    example = torch.randn(2, 128, generator=torch.Generator().manual_seed(1))
    deployed = fxdeploy.lower(LogProbabilities(), (example,), target=target)
    x = _values()
    (got, got_half), (want, want_half) = deployed(x), LogProbabilities()(x)
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())
    finite = want.isfinite()
    # relative, as -exp(-x) is tiny; below float32's smallest normal OpenVINO flushes to 0, and its Log
    # is a few ulps off near 1 (log(1.033): 4e-6 relative)
    rtol = 2e-6 if target == "onnxruntime" else 1e-5
    torch.testing.assert_close(got[finite], want[finite], rtol=rtol, atol=torch.finfo(torch.float32).tiny)
    half = torch.finfo(torch.float16)
    assert got_half.dtype == torch.float16 and torch.equal(got_half.isnan(), want_half.isnan())
    torch.testing.assert_close(got_half.float(), want_half.float(), rtol=half.eps, atol=half.tiny, equal_nan=True)
