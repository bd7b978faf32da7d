"""A min that torch.export raises past 1 (its 0/1 specialization: a size reaching 1 inside the
model) is given back and checked by lower() at the declared min; where that check fails, the
narrowed range stands, said as a DimWarning. monai's SegResNet at D = 8 is the real case."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

import fxdeploy
from fxdeploy.capture.fixes import DimWarning
from fxdeploy.errors import InputError, LoweringError
from fxdeploy.parity import verify
from tests.helpers import require_target


class DownUp(torch.nn.Module):
    """Pool by 8, normalize, upsample by 8: at length 8 the pooled map has one position."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.GroupNorm(2, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(self.norm(F.avg_pool1d(x, 8)), scale_factor=8.0) + x


def _lower(**settings: object) -> tuple[fxdeploy.Deployed, list[str]]:
    require_target("onnxruntime")
    k = torch.export.Dim("k", min=1, max=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        deployed = fxdeploy.lower(DownUp().eval(), (torch.randn(2, 4, 16),), dynamic_shapes={"x": {2: 8 * k}},
                                  settings=fxdeploy.Settings(**settings))
    return deployed, [str(w.message) for w in caught if issubclass(w.category, DimWarning)]


def test_the_declared_min_is_given_back_and_checked() -> None:
    deployed, dim_warnings = _lower()
    assert dim_warnings == []
    assert deployed.manifest["dims"]["k"]["min"] == 1
    assert "(x.shape[2] // 8) != 1" not in deployed.manifest.get("guards", [])
    checks = {c["label"]: c for c in deployed.manifest["info"]["shape_checks"]}
    assert checks["min"]["shapes"] == [[2, 4, 8]] and checks["min"]["max_abs_error"] < 1e-5
    x = torch.randn(2, 4, 8)
    with torch.no_grad():
        want = DownUp().eval()(x)  # GroupNorm's initial affine: the same module
    torch.testing.assert_close(deployed(x), want, rtol=1e-4, atol=1e-5)


def test_where_the_declared_min_fails_the_narrowed_range_stands(monkeypatch: pytest.MonkeyPatch) -> None:
    compare = verify.compare

    def failing_at_min(label: str, inputs: list[torch.Tensor], *args: object, **kwargs: object) -> float:
        if inputs[0].shape[2] == 8:
            raise LoweringError("min: output #0 has shape (2, 5), eager gives (2, 4)")  # no float64 referee for it
        return compare(label, inputs, *args, **kwargs)

    monkeypatch.setattr(verify, "compare", failing_at_min)  # this test only: a model wrong at k = 1
    deployed, dim_warnings = _lower()
    assert len(dim_warnings) == 1
    assert "dim 'k' narrowed by torch.export to [2, 4] (its 0/1 specialization)" in dim_warnings[0]
    assert "min: output #0 has shape (2, 5)" in dim_warnings[0]
    assert deployed.manifest["dims"]["k"]["min"] == 2
    assert "(x.shape[2] // 8) != 1" in deployed.manifest["guards"]
    assert deployed.manifest["info"]["dim_changes"] == dim_warnings
    with pytest.raises(InputError, match=r"k = 1; k must be in \[2, 4\]"):
        deployed(torch.randn(2, 4, 8))


def test_without_lowers_check_the_narrowed_range_stands() -> None:
    # this test's subject is the flag: with lower()'s check off, torch.export's narrowing stays
    deployed, dim_warnings = _lower(verify=False)
    assert deployed.manifest["dims"]["k"]["min"] == 2
    assert len(dim_warnings) == 1 and "narrowed by torch.export to [2, 4]" in dim_warnings[0]
