"""true_guards: a guard torch.export cannot prove is proven over the declared range, exactly."""

from __future__ import annotations

import pytest
import torch

from fxdeploy.artifact.dims import INT_MAX
from fxdeploy.artifact.true_guards import all_hold, holds

CEIL_POOL = """Constraints violated (h)! For more information, run with TORCH_LOGS="+dynamic".
  - Not all values of h = L['x'].size()[2] in the specified range 4 <= h <= 64 satisfy the generated guard \
2*(((-1) + L['x'].size()[2]) // 2) < L['x'].size()[2].
Suggested fixes:
  h = 2*_h"""


@pytest.mark.parametrize(
    ("guard", "low", "high", "expected"),
    [
        ("2*(((-1) + size) // 2) < size", 0, INT_MAX, True),  # max_pool2d(2, 2, ceil_mode=True)'s
        ("2*(size // 2) < size", 4, 64, False),  # false at every even size
        ("2*(size // 2) <= size", 0, INT_MAX, True),
        ("size % 2 == 0", 4, 64, False),
        ("(size // 20) != 1", 20, 4000, False),  # false at 20 to 39 only
        ("(size // 20) != 1", 40, 4000, True),
        ("3*((size + 1) // 3) != size + 5", 0, 50, True),  # both sides differ by 4 to 6
        ("((size // 2) // 3) * 6 <= size", 0, 10**6, True),  # nested divisors: period 6
        ("size < 100", 0, INT_MAX, False),  # false at the top of the range only
        ("size*size > 0", 1, 5, True),  # a product of sizes: not affine, evaluated at each size
        ("size*size > 0", 0, 5, False),  # false at 0
        ("min(size, 2*size) == size", 4, 32, True),  # torch 2.11's guard of a padding mask
        ("min(size, 2*size) == size", 4, INT_MAX, False),  # too wide to evaluate at each size: not proven
        ("max(size, 2) > 2", 0, 5, False),  # false at 0, 1 and 2
        ("max(size, 2) > 1 and 16 // (size - 3) > -100", 0, 5, False),  # size 3 divides by zero
        ("abs(size) >= 0", 0, 5, False),  # another call: not proven
        ("2*(((-1) + size) // 2) < size and size >= 4", 4, 64, True),
    ],
)
def test_guards_are_proven_only_where_they_hold_at_every_size(guard: str, low: int, high: int, expected: bool) -> None:
    assert holds(guard, low, high) is expected
    if expected:  # the proof agrees with every size it can reach here
        assert all(eval(guard, {}, {"size": s}) for s in range(low, min(high, 5000) + 1))  # noqa: S307


def test_a_violation_is_proven_over_the_declared_range() -> None:
    length = torch.export.Dim("length", min=4, max=32)
    mask = CEIL_POOL.replace("h = L['x'].size()[2]", "length = L['x'].size()[2]").replace(
        "2*(((-1) + L['x'].size()[2]) // 2) < L['x'].size()[2]",
        "min(L['x'].size()[2], 2*L['x'].size()[2]) == L['x'].size()[2]")
    assert all_hold(RuntimeError(mask), {"x": {2: length}})
    h = torch.export.Dim("h", min=4, max=64)
    assert all_hold(RuntimeError(CEIL_POOL), {"x": {2: h}})
    assert not all_hold(RuntimeError(CEIL_POOL), {"x": {2: torch.export.Dim("w")}})  # names no declared dim
    odd = CEIL_POOL.replace("2*(((-1) + L['x'].size()[2]) // 2)", "2*(L['x'].size()[2] // 2)")
    assert not all_hold(RuntimeError(odd), {"x": {2: h}})  # false at even sizes: torch's fix stands
    assert not all_hold(RuntimeError("Constraints violated (h)!"), {"x": {2: h}})  # no guard listed
    assert not all_hold(RuntimeError(CEIL_POOL + "\n  - h must be specialized to 16"), {"x": {2: h}})
