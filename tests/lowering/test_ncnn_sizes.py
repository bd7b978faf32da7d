"""Sizes computed from a dynamic height/width that an ncnn layer holds as a fixed parameter (a pad to a
multiple of 32, a split by computed rows): lower() lowers at the example's size and says so, naming
the op; the artifact gives eager's values there and refuses other sizes, never wrong values."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import fxdeploy
from fxdeploy.capture.fixes import DimWarning
from fxdeploy.lowering.ncnn_sizes import fixed_by_trace
from fxdeploy.passes.remove_asserts import remove_asserts
from fxdeploy.settings import Settings
from tests.helpers import require_target

SHAPES = {"x": {2: ("h", 32, 128), 3: ("w", 32, 128)}}
SIZES = ((64, 64), (40, 40), (33, 57), (96, 70), (128, 128))  # 40, 33, 57 and 70 are not multiples of 32


class PadTo32(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[2], x.shape[3]
        return F.pad(x, (0, (-w) % 32, 0, (-h) % 32)) * 2.0  # THE PAD


class SplitRows(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x.shape[2]
        top, bottom = torch.split(x, [h // 3, h - h // 3], dim=2)
        return top * 2.0, bottom + 1.0


class Scaled(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, scale_factor=0.5, mode="nearest") * 2.0


def _graph(model: torch.nn.Module) -> torch.fx.GraphModule:
    h, w = torch.export.Dim("h", min=32, max=128), torch.export.Dim("w", min=32, max=128)
    program = torch.export.export(model, (torch.randn(1, 3, 64, 64),), dynamic_shapes={"x": {2: h, 3: w}},
                                  prefer_deferred_runtime_asserts_over_guards=True)
    return remove_asserts(program.module(check_guards=False), Settings()).graph_module


def test_the_ops_whose_sizes_the_trace_fixes_are_found() -> None:
    assert [found.split(" ")[0] for found in fixed_by_trace(_graph(PadTo32()))] == ["aten.pad.default"]
    assert [found.split(" ")[0] for found in fixed_by_trace(_graph(SplitRows()))] == ["aten.split_with_sizes.default"]
    assert fixed_by_trace(_graph(Scaled())) == []  # a resize's size is traced as the input's


def _eagers_or_refused(deployed: fxdeploy.Deployed, model: torch.nn.Module) -> None:
    """At every size, eager's values (max error), or the size refused by name: never other values."""
    for size in SIZES:
        x = torch.randn(1, 3, *size)
        try:
            got = deployed(x)
        except fxdeploy.InputError as exc:
            assert "must be 64" in str(exc), exc
            continue
        with torch.no_grad():
            want = model(x)
        for have, ref in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,),
                             strict=True):
            assert have.shape == ref.shape, (size, tuple(have.shape), tuple(ref.shape))
            assert float((have - ref).abs().max()) <= 1e-5, size


def test_a_pad_to_a_multiple_of_32_is_lowered_at_the_example_size_and_said() -> None:
    """lower()'s check ran 32, 64 and 128, where the pad is 0: pnnx had dropped it, and the artifact
    returned the unpadded image at 40 x 40."""
    require_target("ncnn")
    model = PadTo32().eval()
    with pytest.warns(DimWarning, match=r"fixed at the example's 64: ncnn: aten\.pad\.default") as said:
        deployed = fxdeploy.lower(model, (torch.randn(1, 3, 64, 64),), target="ncnn", dynamic_shapes=SHAPES)
    line = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if text.endswith("# THE PAD"))
    assert any(f"line {line}" in str(w.message) for w in said)
    _eagers_or_refused(deployed, model)


def test_a_split_by_computed_rows_is_lowered_at_the_example_size_naming_the_split() -> None:
    require_target("ncnn")
    model = SplitRows().eval()
    with pytest.warns(DimWarning, match=r"ncnn: aten\.split_with_sizes\.default .* as a number"):
        deployed = fxdeploy.lower(model, (torch.randn(1, 3, 64, 64),), target="ncnn", dynamic_shapes=SHAPES)
    _eagers_or_refused(deployed, model)


class ColumnIndex(torch.nn.Module):
    """Each pixel's column, ``idx % w`` of an index over the rows and columns: made on the host."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[2], x.shape[3]
        idx = torch.arange(h * w).reshape(h, w)
        return x + (idx % w).float() / w


def test_an_index_modulo_the_width_is_eagers_with_the_batch_fixed_at_1() -> None:
    """The host makes the [h, w] column map, which leads with h, not the batch: with the batch fixed at
    1 the engine refused it ("must share dim 0 (the batch), got sizes ['1', 's0']")."""
    require_target("ncnn")
    model = ColumnIndex().eval()
    deployed = fxdeploy.lower(model, (torch.randn(1, 3, 64, 64),), target="ncnn", dynamic_shapes=SHAPES)
    for size in SIZES:
        x = torch.randn(1, 3, *size)
        with torch.no_grad():
            got, want = deployed(x), model(x)
        assert got.shape == want.shape and float((got - want).abs().max()) <= 1e-5, size
