"""adaptive_pools: an adaptive average pool over a dynamic size reads its windows from the graph's
sizes; torch.onnx's decomposition pooled the example's windows at every size."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fxdeploy.passes import op_histogram
from fxdeploy.passes.adaptive_pools import adaptive_pools, check
from fxdeploy.settings import Settings
from tests.helpers import require_target
from tests.passes.graphs import applied

H, W = torch.export.Dim("h", min=64, max=256), torch.export.Dim("w", min=8, max=64)
SIZES = ((64, 8), (65, 9), (97, 13), (128, 8), (131, 31), (255, 63))


class Pyramid(torch.nn.Module):
    """PSPNet's pooling pyramid, an output size read from the input's, and a pool along one dim."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        pyramid = [F.adaptive_avg_pool2d(x, size) for size in (2, 3, 6, (7, 5))]
        return (*pyramid, F.adaptive_avg_pool2d(x, (x.shape[2] // 3, 4)), F.adaptive_avg_pool1d(x.flatten(2), 5))


class Global(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool2d(x, 1)


def _graph(model: torch.nn.Module, x: torch.Tensor, shapes: object = None) -> torch.fx.GraphModule:
    program = torch.export.export(model, (x,), dynamic_shapes=shapes, prefer_deferred_runtime_asserts_over_guards=True)
    return program.module(check_guards=False)


def _pools(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and "adaptive_avg_pool" in str(n.target)]


def test_every_pool_over_a_dynamic_size_reads_its_windows_at_every_size() -> None:
    model = Pyramid()
    gm = _graph(model, torch.randn(1, 2, 128, 8), ({2: H, 3: W},))
    assert [check(n) for n in _pools(gm)] == [None] * 6
    gm = applied(adaptive_pools, gm)
    assert _pools(gm) == []
    assert op_histogram(gm)["aten.index_select.default"] == 11  # one per pooled dim
    for h, w in SIZES:
        x = torch.randn(1, 2, h, w)
        for index, (got, want) in enumerate(zip(gm(x), model(x), strict=True)):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6, msg=f"output {index} at {(h, w)}")


def test_a_window_past_an_infinity_is_not_read() -> None:
    """The places past a window's end are zeros, not the product of a value with zero (inf * 0 is NaN)."""
    model = Pyramid()
    gm = applied(adaptive_pools, _graph(model, torch.randn(1, 2, 128, 8), ({2: H, 3: W},)))
    x = torch.randn(1, 2, 65, 9)
    x[..., 0, 0] = float("inf")
    for got, want in zip(gm(x), model(x), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize(("model", "shapes", "reason"), [
    (Global(), ({2: H, 3: W},), "a global pool"),
    (Pyramid(), None, "static sizes"),
])
def test_pools_torch_onnx_writes_right_stay(model: torch.nn.Module, shapes: object, reason: str) -> None:
    gm = _graph(model, torch.randn(1, 2, 128, 8), shapes)
    assert all(reason in check(n) for n in _pools(gm))
    assert not adaptive_pools(gm, Settings()).modified


class ThirdRows(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool2d(x, (x.shape[2] // 3, 4))


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_a_pool_to_a_third_of_a_dynamic_height_is_eagers(target: str) -> None:
    """The example's windows were pooled at every height: off by 1.5 at 65, a Gather out of bounds
    at 255; lower()'s check, at heights whose branches agree with the example's, passed."""
    require_target(target)
    import fxdeploy

    model = ThirdRows()
    deployed = fxdeploy.lower(model, (torch.randn(1, 2, 128, 8),), target=target,
                              dynamic_shapes={"x": {2: ("h", 64, 256)}})
    for h in (65, 131, 255):
        x = torch.randn(1, 2, h, 8)
        torch.testing.assert_close(deployed(x), model(x), rtol=1e-5, atol=1e-5)


class MaxPyramid(torch.nn.Module):
    """Adaptive max pools: torch.onnx had no translation of them at any size."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (*[F.adaptive_max_pool2d(x, size) for size in (1, 3, (7, 5))], F.adaptive_max_pool1d(x.flatten(2), 5))


class MaxIndices(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_max_pool2d(x, 3, return_indices=True)[1]


def _nan_at_corners(h: int, w: int) -> torch.Tensor:
    x = torch.randn(1, 2, h, w)
    x[0, 0, 0, 0] = x[0, 1, h - 1, w // 2] = float("nan")
    return x


def test_max_pools_read_their_windows_with_nans_kept() -> None:
    model = MaxPyramid()
    gm = applied(adaptive_pools, _graph(model, torch.randn(1, 2, 128, 8), ({2: H, 3: W},)))
    assert not [n for n in gm.graph.nodes if "adaptive_max_pool" in str(n.target)]
    for h, w in SIZES:
        x = _nan_at_corners(h, w)
        for index, (got, want) in enumerate(zip(gm(x), model(x), strict=True)):
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True, msg=f"output {index} at {(h, w)}")


def test_a_max_pool_whose_indices_are_read_stays() -> None:
    gm = _graph(MaxIndices(), torch.randn(1, 2, 128, 8))
    pool = next(n for n in gm.graph.nodes if "adaptive_max_pool" in str(n.target))
    assert "indices are read" in check(pool)
    assert not adaptive_pools(gm, Settings()).modified


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
@pytest.mark.parametrize("dynamic", [True, False])
def test_lowered_max_pools_are_eagers(target: str, dynamic: bool) -> None:
    """"No ONNX function found for aten.adaptive_max_pool2d", at any size; now eager's values, NaN
    included (ONNX Runtime's ReduceMax skips it)."""
    require_target(target)
    import fxdeploy

    model = MaxPyramid()
    shapes = {"x": {2: ("h", 64, 256), 3: ("w", 8, 64)}} if dynamic else None
    deployed = fxdeploy.lower(model, (torch.randn(1, 2, 128, 8),), target=target, dynamic_shapes=shapes)
    for h, w in SIZES if dynamic else [(128, 8)]:
        x = _nan_at_corners(h, w)
        for index, (got, want) in enumerate(zip(deployed(x), model(x), strict=True)):
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True, msg=f"output {index} at {(h, w)}")
