"""torch.export's guards on input sizes: kept in the manifest as data, checked by Deployed, and
skipped (with a DimWarning) by lower()'s checks at sizes that break them; never executed."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

import fxdeploy
from fxdeploy.artifact import guards
from fxdeploy.capture.fixes import DimWarning
from fxdeploy.errors import ArtifactError, InputError
from tests.helpers import require_target


class ConfiguredSize(torch.nn.Module):
    """A shortcut at the configured 8 x 8 grid, as DINOv2's position embeddings have one at 56 x 56:
    a branch on a non-linear function of the sizes, which torch.export keeps as a guard."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (x.shape[2] // 2) * (x.shape[3] // 2) == 16 and x.shape[2] == x.shape[3]:
            return x * 2
        return x + 1


def _dims() -> dict[str, dict[int, object]]:
    """Heights and widths in steps of 2, as DINOv2's are in steps of its 14-pixel patch."""
    h, w = torch.export.Dim("h", min=2, max=8), torch.export.Dim("w", min=2, max=8)
    return {"x": {0: ("batch", 1, 4), 2: 2 * h, 3: 2 * w}}


def _lowered() -> tuple[fxdeploy.Deployed, list[warnings.WarningMessage]]:
    require_target("onnxruntime")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        deployed = fxdeploy.lower(ConfiguredSize(), (torch.randn(2, 3, 8, 8),), dynamic_shapes=_dims())
    return deployed, [w for w in caught if issubclass(w.category, DimWarning)]


def test_guards_are_kept_checked_and_warned_about(tmp_path: Path) -> None:
    deployed, dim_warnings = _lowered()
    assert "((x.shape[3] // 2)*(x.shape[2] // 2)) == 16" in deployed.manifest["guards"]
    skipped = [c for c in deployed.manifest["info"]["shape_checks"] if c.get("skipped")]
    assert [c["label"] for c in skipped] == ["min", "max"]  # 4 x 4 and 16 x 16 take the other branch
    assert len(dim_warnings) == 2 and "min input shapes [[1, 3, 4, 4]] break" in str(dim_warnings[0].message)
    assert "capture with an example whose sizes take the model's general branch" in str(dim_warnings[0].message)
    assert {w.filename for w in dim_warnings} == {__file__}  # the user's line that called lower(), not fxdeploy's
    x = torch.randn(3, 3, 8, 8)
    torch.testing.assert_close(deployed(x), x * 2)
    with pytest.raises(InputError, match=r"x \[1, 3, 12, 12\]: the artifact holds only where .*== 16"):
        deployed(torch.randn(1, 3, 12, 12))
    # torch.export made W = H one dim (its guard x.shape[2] == x.shape[3]): Deployed names the relation
    with pytest.raises(InputError, match=r"dim 3 \(2\*h, so h = 6\) is 12, but input 'x' has h = 4; they must"):
        deployed(torch.randn(1, 3, 8, 12))
    loaded = fxdeploy.load(deployed.save(tmp_path / "a"))
    with pytest.raises(InputError, match="the artifact holds only where"):
        loaded(torch.randn(1, 3, 4, 4))
    torch.testing.assert_close(loaded(x), x * 2)


def test_a_guard_that_is_not_size_arithmetic_is_refused_on_load(tmp_path: Path) -> None:
    deployed, _ = _lowered()
    path = deployed.save(tmp_path / "a")
    manifest = json.loads((path / "manifest.json").read_text())
    for bad, message in [("__import__('os').system('true')", "holds Call"), ("x.shape[7] == 1", "no input has"),
                         ("y.shape[0] == 1", "no input has"), ("x.shape", "stands alone")]:
        manifest["guards"] = [bad]
        (path / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(ArtifactError, match=message):
            fxdeploy.load(path)


def test_parse_and_evaluate() -> None:
    code = ["((L['x'].size()[3] // 14)*(L['x'].size()[2] // 14)) == 16", "L['x'].size()[2] == L['x'].size()[3]",
            "L['y'].size()[0] == 3", "L['x'].stride()[0] == 3"]
    kept = guards.from_export(code, {"x": ["batch", 3, "14*h", "14*w"], "y": [3]})
    assert kept == ["((x.shape[3] // 14)*(x.shape[2] // 14)) == 16", "x.shape[2] == x.shape[3]"]  # static y, stride
    assert guards.violated(kept, {"x": (5, 3, 56, 56)}) is None
    assert guards.violated(kept, {"x": (1, 3, 56, 70)}) == kept[0]
    assert guards.violated(["not x.shape[0] % 2 or -x.shape[1] < -2"], {"x": (3, 4)}) is None
    for bad in ["x.shape[0] == 1.5", "x.size[0] == 1", "(lambda: 1)()", "x.shape[y.shape[0]] == 1", "x"]:
        with pytest.raises(ValueError):
            guards.parse(bad)
