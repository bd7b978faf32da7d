"""``torch.fmax``/``torch.fmin`` (``fxdeploy/lowering/onnx_translations/fmax.py``): torch.onnx has no translation
(``prims.fmax``), so a model ignoring NaN with them was refused. Now torch's values at every pair of special values."""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from tests.helpers import require_target, special_pairs

SPECIAL = [float("nan"), float("inf"), float("-inf"), 0.0, 1.0, -1.0, 2.5, -2.5]


class IgnoringNan(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ints = a.nan_to_num(0).clamp(-9, 9).long()
        return torch.fmax(a, b), torch.fmin(a, b), torch.fmax(a.half(), b.half()), torch.fmin(ints, ints.flip(-1))


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_fmax_and_fmin_ignore_a_nan_as_torch_does(target: str) -> None:
    require_target(target)
    model = IgnoringNan()
    deployed = fxdeploy.lower(model, (torch.randn(2, 64), torch.randn(2, 64)), target=target,
                              dynamic_shapes={"a": {0: ("batch", 1, 4)}, "b": {0: ("batch", 1, 4)}})
    a, b = special_pairs(SPECIAL)
    for i, (got, want) in enumerate(zip(deployed(a, b), model(a, b), strict=True)):
        assert got.dtype == want.dtype, f"output {i}"
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True, msg=f"output {i}")
    assert deployed(a, b)[0].isnan().sum() == 1  # NaN only where both are: the one pair (NaN, NaN)
