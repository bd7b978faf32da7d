"""pool_divisors: an average pool with a divisor override becomes the plain pool, scaled."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import fxdeploy
from fxdeploy.passes import op_histogram
from fxdeploy.passes.pool_divisors import check, pool_divisors
from fxdeploy.settings import Settings
from tests.helpers import require_target
from tests.passes.graphs import applied


class Pool(torch.nn.Module):
    def __init__(self, rank: int, **options: object) -> None:
        super().__init__()
        self.pool, self.options = (F.avg_pool2d if rank == 2 else F.avg_pool3d), options

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x, **self.options)


def _graph(model: torch.nn.Module, x: torch.Tensor, shapes: object = None) -> torch.fx.GraphModule:
    return torch.export.export(model, (x,), dynamic_shapes=shapes).module(check_guards=False)


def _pool(gm: torch.fx.GraphModule) -> torch.fx.Node:
    return next(n for n in gm.graph.nodes if n.op == "call_function" and "avg_pool" in str(n.target))


CASES = [
    (2, {"kernel_size": 3, "stride": 2, "padding": 1, "divisor_override": 4}, (2, 3, 16, 16)),
    (2, {"kernel_size": (2, 3), "divisor_override": 1}, (1, 2, 7, 9)),  # a sum pool
    (2, {"kernel_size": 3, "padding": 1, "count_include_pad": False, "divisor_override": 9}, (1, 4, 5, 5)),
    (2, {"kernel_size": 2, "ceil_mode": True, "divisor_override": 3}, (1, 2, 8, 6)),  # ceil adds no window
    (2, {"kernel_size": 4, "stride": 4, "divisor_override": 16}, (2, 1, 8, 8)),  # prod(kernel) == divisor
    (3, {"kernel_size": 2, "stride": 1, "padding": 1, "divisor_override": 5}, (1, 2, 4, 5, 6)),
]


@pytest.mark.parametrize(("rank", "options", "shape"), CASES)
def test_a_divisor_override_is_the_plain_pool_scaled(rank: int, options: dict, shape: tuple[int, ...]) -> None:
    model, x = Pool(rank, **options), torch.randn(shape, generator=torch.Generator().manual_seed(0))
    gm = applied(pool_divisors, _graph(model, x))
    pool = f"aten.avg_pool{rank}d.default"
    assert op_histogram(gm) == {pool: 1, "aten.mul.Tensor": 1}
    assert _pool(gm).args[4:] == (False, True, None)  # floor mode, padding counted, no override
    torch.testing.assert_close(gm(x), model(x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("options", "shape", "shapes", "reason"),
    [
        ({"kernel_size": 3}, (1, 1, 6, 6), None, "no divisor override"),
        ({"kernel_size": 2, "ceil_mode": True, "divisor_override": 3}, (1, 1, 8, 8),
         ({2: 2 * torch.export.Dim("h", min=2, max=16)},), "ceil_mode at a dynamic size"),
    ],
)
def test_pools_it_cannot_prove_stay(options: dict, shape: tuple[int, ...], shapes: object, reason: str) -> None:
    gm = _graph(Pool(2, **options), torch.randn(shape), shapes)
    assert reason in check(_pool(gm))
    assert not pool_divisors(gm, Settings()).modified


def test_at_a_dynamic_size_in_floor_mode_it_fires() -> None:
    model = Pool(2, kernel_size=3, stride=2, padding=1, divisor_override=2)
    gm = applied(pool_divisors, _graph(model, torch.randn(1, 2, 8, 8), ({3: torch.export.Dim("w", min=3, max=32)},)))
    for width in (3, 7, 32):
        x = torch.randn(1, 2, 8, width)
        torch.testing.assert_close(gm(x), model(x), rtol=1e-6, atol=1e-6)


CEIL_PAST_PADDING = [
    (2, {"kernel_size": 2, "ceil_mode": True, "divisor_override": 3}, (1, 2, 7, 7)),
    (2, {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "divisor_override": 5}, (2, 3, 10, 7)),
    (2, {"kernel_size": (3, 2), "stride": (3, 2), "ceil_mode": True, "divisor_override": 1}, (1, 1, 8, 5)),
    (3, {"kernel_size": 2, "ceil_mode": True, "divisor_override": 7}, (1, 2, 5, 4, 3)),
]


@pytest.mark.parametrize(("rank", "options", "shape"), CEIL_PAST_PADDING)
def test_a_ceil_mode_window_past_the_padding_sums_what_it_holds(rank: int, options: dict, shape: tuple) -> None:
    """Its divisor is the override whatever the window holds: the input padded with zeros that
    far, then the plain pool scaled (it was left as it was, and refused by the check)."""
    model, x = Pool(rank, **options), torch.randn(shape, generator=torch.Generator().manual_seed(0))
    gm = applied(pool_divisors, _graph(model, x))
    assert op_histogram(gm) == {"aten.constant_pad_nd.default": 1, f"aten.avg_pool{rank}d.default": 1,
                                "aten.mul.Tensor": 1}
    torch.testing.assert_close(gm(x), model(x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("target", ["onnxruntime", "openvino", "ncnn", "torchscript"])
def test_a_ceil_mode_divisor_override_runs_everywhere(target: str) -> None:
    """It was refused by lower()'s check on ONNX Runtime and OpenVINO (off by 0.73), and ncnn failed to
    load pnnx's pooling layer ("layer load_param ... avgpool2d failed", printed on stdout)."""
    require_target(target)
    model = Pool(2, kernel_size=3, stride=2, ceil_mode=True, divisor_override=3)
    deployed = fxdeploy.lower(model, (torch.randn(2, 3, 12, 9),), target=target,
                              dynamic_shapes={"x": {0: ("batch", 1, 4)}})
    for batch in (1, 3):
        y = torch.randn(batch, 3, 12, 9, generator=torch.Generator().manual_seed(batch))
        torch.testing.assert_close(deployed(y), model(y), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", ["onnxruntime", "openvino", "ncnn", "torchscript"])
def test_every_target_runs_a_divisor_override(target: str) -> None:
    """Before: ONNX Runtime and OpenVINO were off by prod(kernel) / divisor (lower()'s check refused
    the artifact), and ncnn failed to load pnnx's pooling layer."""
    require_target(target)
    model = Pool(2, kernel_size=3, stride=2, padding=1, divisor_override=4)
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    deployed = fxdeploy.lower(model, (x,), target=target, dynamic_shapes={"x": {0: ("batch", 1, 4)}})
    for batch in (1, 3):
        y = torch.randn(batch, 3, 16, 16, generator=torch.Generator().manual_seed(batch))
        torch.testing.assert_close(deployed(y), model(y), rtol=1e-5, atol=1e-5)
