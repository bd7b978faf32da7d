"""Executor.execute times the engine only: its ``check`` hook runs first, outside the timed region.

A fake clock makes it exact: checking advances it 50 ms, running 1 ms, and nothing else does.
"""

from __future__ import annotations

import pytest
import torch

from fxdeploy.errors import InputError
from fxdeploy.runtime import executor as executor_module
from fxdeploy.runtime.executor import Executor

MS = 1_000_000


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class Checked(Executor):
    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock

    def check(self, feeds: dict[str, torch.Tensor]) -> None:
        self.clock.now += 50 * MS
        if feeds["x"].shape[0] > 4:
            raise InputError(f"input 'x': dim 0 is {feeds['x'].shape[0]}, above the profile's 4")

    def run(self, feeds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        self.clock.now += MS
        return {"y": feeds["x"] + 1}


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(executor_module.time, "perf_counter_ns", fake)
    return fake


def test_check_runs_before_the_timed_region(clock: Clock) -> None:
    executor = Checked(clock)
    out = executor.execute({"x": torch.zeros(2)})
    executor.execute_images([{"x": torch.zeros(1)}, {"x": torch.zeros(3)}])
    assert torch.equal(out["y"], torch.ones(2))
    stats = executor.stats
    assert stats.count == 2
    assert (stats.min, stats.max) == (1.0, 2.0), "the timed region holds run() only, one or two images"


def test_a_rejected_input_records_no_timing(clock: Clock) -> None:
    executor = Checked(clock)
    with pytest.raises(InputError, match="above the profile"):
        executor.execute({"x": torch.zeros(5)})
    with pytest.raises(InputError, match="above the profile"):
        executor.execute_images([{"x": torch.zeros(1)}, {"x": torch.zeros(5)}])
    assert executor.stats.count == 0
