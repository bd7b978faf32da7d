"""Integer floor division, remainder and shifts on OpenVINO
(``fxdeploy/lowering/onnx_translations/exact_integers.py``): its CPU plugin computes an integer
``Div``, ``Mod`` and ``BitShift`` in float32 and int64 as int32, so ``16777217 % 1000`` gave 216 (torch
217) and ``-1 >> 2`` 2147483647; lowered from a small non-negative example, lower()'s check passed and
the artifact was silently wrong. Every int32 dividend at the type's edges against every divisor kind
(small, powers of two, near 2**24, past 2**30, negative), exactly, on ONNX Runtime and OpenVINO."""

from __future__ import annotations

import itertools

import pytest
import torch

import fxdeploy
from fxdeploy.errors import InputError
from tests.helpers import require_target

EDGES = [0, 1, -1, 2, -2, 3, -3, 7, -7, 999, -999, 4096, 65537, 46341, 2**24 - 1, 2**24, 2**24 + 1, -(2**24 + 1),
         2**24 + 999, 2**30 - 1, 2**30, 2**30 + 1, -(2**30), -(2**30 + 1), 2**31 - 1, -(2**31 - 1), -(2**31),
         123456789, -987654321, 1073741789, -2147483600]
TARGETS = ["onnxruntime", "openvino"]


def pairs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Every pair of edge values and some random int32 ones: a nonzero divisor, a quotient in int32.
    ONNX Runtime's int32 ``(2**30 + 1) // -2**30`` gave 2 (eager -2): its floored multiple overflowed."""
    values = EDGES + torch.randint(-(2**31), 2**31 - 1, (24,), generator=torch.Generator().manual_seed(0)).tolist()
    grid = [(a, b) for a, b in itertools.product(values, values) if b != 0 and not (a == -(2**31) and b == -1)]
    a, b = zip(*grid, strict=True)
    return torch.tensor([a], dtype=dtype), torch.tensor([b], dtype=dtype)


class Divisions(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (a // b, a % b, torch.div(a, b, rounding_mode="trunc"), torch.floor_divide(a, b),
                torch.remainder(a, b), a % 1000, a // 7, a // -3, a % -(2**31 - 1), a // (2**30 + 5),
                torch.div(a, -4096, rounding_mode="trunc"), a >> 2, a >> 17, torch.bitwise_right_shift(a, 40),
                torch.fmod(a, b), torch.fmod(a, -1000))


class Shifts(torch.nn.Module):
    def forward(self, a: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return a >> k, a << k, torch.bitwise_left_shift(a, 3)


def lower(model: torch.nn.Module, target: str, *example: torch.Tensor) -> fxdeploy.Deployed:
    """Lowered from a small non-negative example: lower()'s check met none of the values tested."""
    require_target(target)
    names = (("a", "k") if isinstance(model, Shifts) else ("a", "b"))[:len(example)]
    shapes = {name: {1: ("n", 1, 8192)} for name in names}
    return fxdeploy.lower(model, example, target=target, dynamic_shapes=shapes)


def assert_exact(got: tuple[torch.Tensor, ...], want: tuple[torch.Tensor, ...], *inputs: torch.Tensor) -> None:
    for index, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.dtype == w.dtype, f"output {index}"
        wrong = (g != w).nonzero()
        if len(wrong):
            at = tuple(wrong[0].tolist())
            where = ", ".join(str(x[at].item()) for x in inputs)
            raise AssertionError(f"output {index}: {g[at].item()} where eager gives {w[at].item()} at ({where})")


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("target", TARGETS)
def test_division_and_remainder_are_torchs_across_int32(target: str, dtype: torch.dtype) -> None:
    model = Divisions()
    example = torch.randint(0, 100, (1, 16), dtype=dtype), torch.randint(1, 100, (1, 16), dtype=dtype)
    deployed = lower(model, target, *example)
    a, b = pairs(dtype)
    assert_exact(deployed(a, b), model(a, b), a, b)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8])
@pytest.mark.parametrize("target", TARGETS)
def test_signed_shifts_are_torchs(target: str, dtype: torch.dtype) -> None:
    """Arithmetic right shifts of negative values, by every amount (past the type's width and
    negative: the sign); left shifts where torch's result fits in int32 (OpenVINO's reach)."""
    model = Shifts()
    example = torch.randint(0, 100, (1, 16), dtype=dtype), torch.randint(0, 4, (1, 16), dtype=dtype)
    deployed = lower(model, target, *example)
    info = torch.iinfo(dtype)
    values = [v for v in EDGES if info.min <= v <= info.max]
    grid = list(itertools.product(values, range(-2, 70 if dtype == torch.int64 else info.bits + 3)))
    a, k = (torch.tensor([list(column)], dtype=dtype) for column in zip(*grid, strict=True))
    got, want = deployed(a, k), model(a, k)
    assert_exact(got[:1], want[:1], a, k)
    fits = (want[1] == (a.double() * 2.0 ** k.clamp(0).double()).where((k >= 0) & (k < info.bits), 0)) & \
        (want[1].double().abs() < 2**31) if dtype == torch.int64 else torch.ones_like(a, dtype=torch.bool)
    assert_exact((got[1][fits],), (want[1][fits],), a[fits], k[fits])
    small = a.abs() < 2**20
    assert_exact((got[2][small],), (want[2][small],), a[small])


class Wide(torch.nn.Module):
    def forward(self, a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return a + 1, a % 1000, a >> 3


@pytest.mark.parametrize("target", TARGETS)
def test_an_int64_input_past_int32_is_refused_on_openvino(target: str) -> None:
    """OpenVINO computes int64 as int32: ``2**31 + 1`` came back -2147483647 from ``a + 1``. Its
    executor refuses such an input; ONNX Runtime computes int64."""
    model = Wide()
    deployed = lower(model, target, torch.randint(0, 100, (1, 16)))
    a = torch.tensor([[2**31, -(2**31) - 1, 2**40 + 3, 5]])
    if target == "openvino":
        with pytest.raises(InputError, match="input 'a' holds -2147483649, past int32's range"):
            deployed(a)
        a = torch.tensor([[2**31 - 2, -(2**31), 5, -5]])  # int32's own edges still run
    assert_exact(deployed(a), model(a), a)
