"""Property: any input gives either an InputError that names it or eager's result; nothing else.

Random ranks, dims, dtypes and layouts (torch or numpy, contiguous or not) are fed to the
convnet on a random available target. An independent oracle says which of the two must happen,
and for an error, which check must fire first (dtype, then rank, then dims).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import fxdeploy
from tests.reliability.conftest import AVAILABLE, tolerance

EXAMPLES = 150
EXPECTED = (3, 64, 64)
TORCH_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                torch.uint8, torch.bool, torch.complex64]
NUMPY_DTYPES = ["<f4", ">f4", "<f8", "<f2", "<i8", "<i4", "|u1", "|b1", "<c8", "|O"]
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def shapes(draw: st.DrawFn) -> tuple[int, ...]:
    """Mostly near the valid shape, so valid inputs and every error kind all come up."""
    rank = draw(st.sampled_from([4, 4, 4, 0, 1, 2, 3, 5]))
    if rank != 4:
        return tuple(draw(st.integers(0, 4)) for _ in range(rank))
    batch = draw(st.integers(0, 5))
    rest = tuple(draw(st.sampled_from([want, want, want, want - 1, want + 1, 1])) for want in EXPECTED)
    return (batch, *rest)


@st.composite
def inputs(draw: st.DrawFn) -> Any:
    shape = draw(shapes())
    if draw(st.booleans()):
        dtype = draw(st.sampled_from(NUMPY_DTYPES))
        array = np.random.default_rng(draw(st.integers(0, 2**16))).standard_normal(shape).astype(dtype)
        return array.T.copy().T if draw(st.booleans()) else array  # a Fortran-ordered layout too
    dtype = draw(st.sampled_from(TORCH_DTYPES))
    x = torch.randn(shape).to(dtype)
    layout = draw(st.sampled_from(["contiguous", "channels_last", "transposed"]))
    if layout == "channels_last" and x.dim() == 4:
        return x.contiguous(memory_format=torch.channels_last)
    if layout == "transposed" and x.dim() >= 2:
        return x.transpose(-1, -2).contiguous().transpose(-1, -2)  # same values, non-contiguous
    return x


def _expected_error(value: Any) -> str | None:
    """The oracle: None when the input is valid, else the start of the message it must get."""
    if isinstance(value, np.ndarray):
        if value.dtype.str != "<f4":
            return "input 'x': expected dtype float32, got "
    elif value.dtype != torch.float32:
        return "input 'x': expected dtype float32, got "
    if value.ndim != 4:
        return "input 'x': expected rank 4 (shape [batch, 3, 64, 64]), got rank "
    if not 1 <= value.shape[0] <= 4:
        return "input 'x': dim 0 (batch) must be in [1, 4], got "
    for axis, want in enumerate(EXPECTED, start=1):
        if value.shape[axis] != want:
            return f"input 'x': dim {axis} must be {want} (shape [batch, 3, 64, 64]), got "
    return None


@pytest.mark.skipif(not AVAILABLE, reason="no target is available here")
@FUZZ
@given(value=inputs(), target_index=st.integers(0, max(len(AVAILABLE) - 1, 0)))
def test_any_input_gives_named_error_or_eager_result(convnet, value: Any, target_index: int) -> None:
    target = AVAILABLE[target_index]
    lowered = convnet(target)
    before = lowered.deployed.stats.count
    expected = _expected_error(value)
    event("valid" if expected is None else expected.split(": ")[1].split(" (")[0][:24])
    if expected is None:
        got = lowered.deployed(value)
        with torch.no_grad():
            want = lowered.model(torch.from_numpy(np.array(value)) if isinstance(value, np.ndarray) else value)
        assert got.shape == want.shape
        assert (got - want).abs().max().item() <= tolerance(target)
    else:
        with pytest.raises(fxdeploy.InputError) as info:
            lowered.deployed(value)
        assert str(info.value).startswith(expected), str(info.value)
    assert lowered.deployed.stats.count == before + (expected is None)


keys = st.one_of(st.text(max_size=4), st.integers(-3, 3), st.none(), st.tuples(st.integers(0, 2)))


@pytest.mark.skipif(not AVAILABLE, reason="no target is available here")
@FUZZ
@given(names=st.lists(keys, max_size=4, unique_by=repr))
def test_any_execute_keys_give_named_error_or_a_call(convnet, names: list[Any]) -> None:
    """Keys of any type, present or not: the message lists what is missing and what is unknown."""
    deployed = convnet(AVAILABLE[0]).deployed
    feeds = {name: torch.randn(1, 3, 64, 64) for name in names}
    unknown = sorted((n for n in names if n != "x"), key=repr)
    missing = [] if "x" in names else ["x"]
    if missing or unknown:
        with pytest.raises(fxdeploy.InputError) as info:
            deployed.execute(feeds)
        assert str(info.value) == f"execute() inputs: expected names ['x']; missing {missing}, unknown {unknown}"
    else:
        assert deployed.execute(feeds)["output"].shape == (1, 10)
