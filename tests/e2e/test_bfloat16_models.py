"""Models that compute in bfloat16 themselves, at fp32 settings: cast with ``.bfloat16()``, a
``torch.autocast`` region in forward, a bfloat16 output. OpenVINO and TorchScript run them (and
pass bfloat16 in and out); ONNX Runtime is refused, naming why (no bfloat16 kernels on its CPU
provider). None of this needs a CPU with native bfloat16."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import fxdeploy
from fxdeploy.errors import LoweringError
from fxdeploy.parity import closeness
from tests.helpers import require_target

BF16_BOUND = closeness.DTYPE_ULPS * torch.finfo(torch.bfloat16).eps


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).eval()


class AutocastRegion(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inner, self.head = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            hidden = self.inner(x).relu()
        return self.head(hidden.float())


class BFloat16Output(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.linear(x)
        return y.bfloat16(), y


def _close(got: torch.Tensor, want: torch.Tensor) -> bool:
    want = want.detach()
    scale = max(1.0, float(want.float().abs().max()))
    return float((got.float() - want.float()).abs().max()) <= BF16_BOUND * scale


@pytest.mark.parametrize("target", ["openvino", "torchscript"])
def test_a_model_cast_to_bfloat16_runs_with_bfloat16_inputs_and_outputs(target: str, tmp_path: Path) -> None:
    require_target(target)
    model = _mlp().bfloat16()
    x = torch.randn(3, 8, dtype=torch.bfloat16)
    deployed = fxdeploy.lower(model, (x,), target=target, dynamic_shapes={"input": {0: ("batch", 1, 8)}})
    deployed.save(tmp_path / "m")
    loaded = fxdeploy.load(tmp_path / "m")
    for batch in (1, 5):
        x = torch.randn(batch, 8, dtype=torch.bfloat16)
        want = model(x)
        for runner in (deployed, loaded):
            got = runner(x)
            assert got.dtype == torch.bfloat16
            assert _close(got, want), (batch, got, want)


@pytest.mark.parametrize("target", ["openvino", "torchscript"])
def test_an_autocast_region_in_forward_lowers_and_matches_eager(target: str) -> None:
    require_target(target)
    model = AutocastRegion().eval()
    x = torch.randn(4, 8)
    deployed = fxdeploy.lower(model, (x,), target=target)
    x = torch.randn(4, 8)
    assert _close(deployed(x), model(x))


def test_a_bfloat16_output_of_openvino_holds_eagers_values() -> None:
    require_target("openvino")
    model = BFloat16Output().eval()
    x = torch.randn(3, 8)
    deployed = fxdeploy.lower(model, (x,), target="openvino")
    got, got_float = deployed(x)
    with torch.no_grad():
        want, want_float = model(x)
    assert got.dtype == torch.bfloat16
    assert float((got.float() - want.float()).abs().max()) <= BF16_BOUND * max(1.0, float(want.float().abs().max()))
    assert torch.allclose(got_float, want_float, atol=1e-5)


@pytest.mark.parametrize("model", [_mlp().bfloat16(), AutocastRegion().eval()], ids=["cast", "autocast"])
def test_onnxruntime_refuses_bfloat16_saying_why_and_what_runs_it(model: torch.nn.Module) -> None:
    dtype = next(model.parameters()).dtype
    with pytest.raises(LoweringError) as info:
        fxdeploy.lower(model, (torch.randn(3, 8, dtype=dtype),), target="onnxruntime")
    message = str(info.value)
    assert "computes in bfloat16" in message and "'openvino' or 'torchscript'" in message, message
    assert "did not expect" not in message, message


def test_only_ops_computing_in_half_raise_the_checks_tolerance() -> None:
    settings = fxdeploy.Settings()
    autocast = torch.export.export(AutocastRegion().eval(), (torch.randn(2, 8),)).run_decompositions({})
    assert closeness.tolerance(settings, autocast.module()) == pytest.approx(BF16_BOUND)

    class Rounds(torch.nn.Module):  # a conversion to half and a comparison in it compute nothing in half
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x.half() >= 0.1).float() + x.half().float()

    rounds = torch.export.export(Rounds(), (torch.randn(2, 8),)).module()
    assert closeness.tolerance(settings, rounds) == settings.atol
    assert closeness.tolerance(fxdeploy.Settings(precision="fp16"), autocast.module()) == settings.atol
