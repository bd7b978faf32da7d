"""antialiased_resizes (the ONNX targets): an antialiased bilinear or bicubic resize as weighted sums of
gathered rows and columns, the weights torch's own resize of the identity. OpenVINO read ONNX's antialiased
Resize as a plain one (off by 0.48 on a 16x24 -> 5x7 downscale) and ONNX Runtime's cubic weights are not
torch's (0.81 off), so lower()'s check refused those artifacts."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import fxdeploy
from fxdeploy.passes.antialiased_resizes import check
from tests.helpers import require_target


class Resizes(torch.nn.Module):
    """torchvision's tensor Resize (bilinear, antialiased), bicubic by a factor, an upscale with aligned corners."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (F.interpolate(x, size=(5, 7), mode="bilinear", antialias=True),
                F.interpolate(x, scale_factor=0.4, mode="bicubic", antialias=True),
                F.interpolate(x, size=(30, 20), mode="bilinear", antialias=True, align_corners=True))


@pytest.mark.parametrize("target", ["openvino", "onnxruntime"])
def test_antialiased_resizes_match_eager_at_a_dynamic_batch(target: str) -> None:
    require_target(target)
    x = torch.randn(2, 3, 16, 24, generator=torch.Generator().manual_seed(0))
    deployed = fxdeploy.lower(Resizes(), (x,), target=target, dynamic_shapes={"x": {0: ("batch", 1, 4)}})
    other = torch.randn(3, 3, 16, 24, generator=torch.Generator().manual_seed(1))
    for got, want in zip(deployed(other), Resizes()(other), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("target", "mode"), [("openvino", "bilinear"), ("onnxruntime", "bicubic")])
def test_a_dynamic_height_is_refused_naming_the_resize(target: str, mode: str) -> None:
    require_target(target)
    x = torch.randn(1, 3, 16, 24)
    with pytest.raises(fxdeploy.LoweringError, match=rf"{target}: an antialiased {mode} resize at "
                                                     r".*test_antialiased_resizes\.py.*a height or width is dynamic"
                                                     r".*static height and width"):
        fxdeploy.lower(Resizes(), (x,), target=target, dynamic_shapes={"x": {2: ("height", 8, 64)}})


def test_a_dynamic_height_keeps_onnx_runtimes_own_bilinear_resize() -> None:
    """ONNX Runtime's antialiased bilinear Resize is torch's: left to it where the sizes are dynamic."""
    require_target("onnxruntime")

    class Bilinear(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.interpolate(x, size=(5, 7), mode="bilinear", antialias=True)

    deployed = fxdeploy.lower(Bilinear(), (torch.randn(1, 3, 16, 24),), target="onnxruntime",
                              dynamic_shapes={"x": {2: ("height", 8, 64)}})
    x = torch.randn(1, 3, 40, 24)
    torch.testing.assert_close(deployed(x), Bilinear()(x), rtol=1e-5, atol=1e-5)


def test_check_says_why_a_node_is_left() -> None:
    gm = torch.export.export(Resizes(), (torch.randn(1, 3, 16, 24),)).run_decompositions({}).module()
    reasons = [check(n) for n in gm.graph.nodes]
    assert reasons.count(None) == 3 and "not an antialiased resize" in reasons
