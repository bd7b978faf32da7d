"""ceil_pool_counts: a ceil-mode average pool counting the padding divides by what its window holds."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fxdeploy.passes import op_histogram
from fxdeploy.passes.ceil_pool_counts import ceil_pool_counts, check
from fxdeploy.settings import Settings
from tests.passes.graphs import applied
from tests.passes.test_pool_divisors import Pool


def _graph(model: torch.nn.Module, x: torch.Tensor, shapes: object = None) -> torch.fx.GraphModule:
    """The exported graph; torch's guard on a ceil-mode pool's output size (true at every size, as
    capture proves: fxdeploy.artifact.true_guards) as a runtime assert."""
    program = torch.export.export(model, (x,), dynamic_shapes=shapes, prefer_deferred_runtime_asserts_over_guards=True)
    return program.module(check_guards=False)


def _pool(gm: torch.fx.GraphModule) -> torch.fx.Node:
    return next(n for n in gm.graph.nodes if n.op == "call_function" and "avg_pool" in str(n.target))


CASES = [  # (rank, options, shape, padded): the last window hangs past the padding at these sizes
    (2, {"kernel_size": 2, "ceil_mode": True}, (1, 3, 7, 9), False),
    (2, {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}, (2, 3, 16, 11), True),
    (2, {"kernel_size": (3, 2), "stride": 2, "padding": (1, 0), "ceil_mode": True}, (1, 2, 8, 5), True),
    (3, {"kernel_size": 2, "ceil_mode": True}, (1, 2, 5, 4, 3), False),
]


@pytest.mark.parametrize(("rank", "options", "shape", "padded"), CASES)
def test_zeros_pad_and_the_window_counts(rank: int, options: dict, shape: tuple, padded: bool) -> None:
    model, x = Pool(rank, **options), torch.randn(shape, generator=torch.Generator().manual_seed(0))
    gm = applied(ceil_pool_counts, _graph(model, x))
    pool = f"aten.avg_pool{rank}d.default"
    assert op_histogram(gm) == ({pool: 1, "aten.constant_pad_nd.default": 1} if padded else {pool: 1})
    assert list(_pool(gm).args[3]) == [0] * rank and _pool(gm).args[4:6] == (True, False)
    torch.testing.assert_close(gm(x), model(x), rtol=1e-6, atol=1e-6)


def test_at_a_dynamic_size_it_holds_at_every_size() -> None:
    model = Pool(2, kernel_size=3, stride=2, padding=1, ceil_mode=True)
    h, w = torch.export.Dim("h", min=3, max=40), torch.export.Dim("w", min=3, max=40)
    gm = applied(ceil_pool_counts, _graph(model, torch.randn(1, 2, 8, 8), ({2: h, 3: w},)))
    for size in ((3, 3), (7, 8), (16, 11), (33, 40)):
        x = torch.randn(1, 2, *size)
        torch.testing.assert_close(gm(x), model(x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"kernel_size": 2, "ceil_mode": True, "count_include_pad": False}, "not ceil_mode with count_include_pad"),
        ({"kernel_size": 3, "stride": 2, "padding": 1}, "not ceil_mode with count_include_pad"),
        ({"kernel_size": 2, "ceil_mode": True, "divisor_override": 3}, "a divisor override"),
        ({"kernel_size": 2, "stride": 2, "padding": 1, "ceil_mode": True}, "torch may drop a last window"),
    ],
)
def test_pools_it_cannot_prove_stay(options: dict, reason: str) -> None:
    gm = _graph(Pool(2, **options), torch.randn(1, 1, 9, 9))
    assert reason in check(_pool(gm))
    assert not ceil_pool_counts(gm, Settings()).modified


def test_where_torch_drops_a_window_the_padded_pool_would_keep() -> None:
    """Why the check refuses padding past kernel less stride: at h = 5, k = s = 2, p = 1 torch drops
    the last window (it starts in the right padding), the pool of the padded input keeps it."""
    x = torch.randn(1, 1, 5, 5)
    assert F.avg_pool2d(x, 2, 2, 1, ceil_mode=True).shape[-1] == 3
    assert F.avg_pool2d(F.pad(x, [1, 1, 1, 1]), 2, 2, 0, ceil_mode=True, count_include_pad=False).shape[-1] == 4
