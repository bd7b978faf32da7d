"""A ceil-mode pool at a dynamic height and width takes odd and even sizes on every target.

torch's meta function guards the output size of ``max_pool2d(x, 2, 2, ceil_mode=True)`` on
``2*((h - 1) // 2) < h``: true at every ``h``, but torch.export cannot prove it and suggests
``h = 2*_h``. Capture proves it (``fxdeploy.artifact.true_guards``) and keeps the declared range.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import fxdeploy
from fxdeploy.capture.fixes import DimWarning
from tests.helpers import require_target

SIZES = [(16, 16), (15, 17), (9, 12), (5, 5), (7, 4), (33, 64)]
POOLS = {
    "max": lambda y: F.max_pool2d(y, 2, 2, ceil_mode=True),
    "max_padded": lambda y: F.max_pool2d(y, 3, 2, 1, ceil_mode=True),
    "avg": lambda y: F.avg_pool2d(y, 2, 2, ceil_mode=True),
    "avg_padded": lambda y: F.avg_pool2d(y, 3, 2, 1, ceil_mode=True),
}


class ConvPool(torch.nn.Module):
    def __init__(self, pool: str) -> None:
        super().__init__()
        self.conv, self.pool = torch.nn.Conv2d(3, 8, 3, padding=1), POOLS[pool]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.conv(x))


@pytest.mark.parametrize("pool", sorted(POOLS))
@pytest.mark.parametrize("target", ["onnxruntime", "openvino", "torchscript", "ncnn"])
def test_a_ceil_mode_pool_takes_odd_and_even_sizes(target: str, pool: str) -> None:
    require_target(target)
    torch.manual_seed(0)
    model = ConvPool(pool).eval()
    shapes = {"x": {2: ("h", 4, 64), 3: ("w", 4, 64)}}
    with warnings.catch_warnings():
        warnings.simplefilter("error", DimWarning)  # no dim narrowed, no fix applied
        deployed = fxdeploy.lower(model, (torch.randn(1, 3, 16, 16),), target=target, dynamic_shapes=shapes)
    assert deployed.manifest["dims"]["h"]["min"] == 4 and deployed.manifest["dims"]["h"]["max"] == 64
    for size in SIZES:
        x = torch.randn(1, 3, *size)
        with torch.no_grad():
            want = model(x)
        got = deployed(x)
        assert got.shape == want.shape, size
        error = (got - want).abs().max().item()
        assert error < 1e-4, f"{size}: max error {error}"


class PoolAndGroups(torch.nn.Module):
    """A ceil-mode pool beside a view that needs ``h*w % 4 == 0``: a guard that does not always hold."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(x, 2, 2, ceil_mode=True) + x.view(1, 3, -1, 4).sum(-1).mean()


def test_the_guards_that_do_not_always_hold_are_still_checked() -> None:
    """Exported with its guards as runtime asserts (which the passes drop), the model keeps the
    guards that do not hold at every size in the manifest, where ``Deployed`` checks them."""
    model = PoolAndGroups()
    shapes = {"x": {2: ("h", 8, 64), 3: ("w", 8, 64)}}
    with warnings.catch_warnings():
        warnings.simplefilter("error", DimWarning)
        deployed = fxdeploy.lower(model, (torch.randn(1, 3, 16, 16),), dynamic_shapes=shapes)
    assert "((3*x.shape[3]*x.shape[2]) % 12) == 0" in deployed.manifest["guards"]
    for size in ((15, 16), (9, 8), (16, 12)):
        x = torch.randn(1, 3, *size)
        assert (deployed(x) - model(x)).abs().max().item() < 1e-4, size
    with pytest.raises(fxdeploy.InputError, match=r"the artifact holds only where"):
        deployed(torch.randn(1, 3, 15, 15))
