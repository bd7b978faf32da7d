"""One Deployed called from 8 threads at once: every result and every count must hold.

Results are kept until all threads finish, so an engine that reused an output buffer across
calls would show up as a mismatch. A stub executor shows that Deployed serializes the calls of
an engine that declares ``thread_safe = False``, and does not serialize the others.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

import fxdeploy
from fxdeploy.runtime.executor import Executor
from tests.reliability.conftest import TARGETS

THREADS = 8
CALLS = 1000
DISTINCT = 16


def _hammer(call, inputs: list[torch.Tensor]) -> list[tuple[int, torch.Tensor]]:
    """CALLS calls spread over THREADS threads that all start together."""
    start = threading.Barrier(THREADS)

    def worker(first: int) -> list[tuple[int, torch.Tensor]]:
        start.wait()
        return [(k % DISTINCT, call(inputs[k % DISTINCT])) for k in range(first, CALLS, THREADS)]

    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        return [pair for chunk in pool.map(worker, range(THREADS)) for pair in chunk]


@pytest.mark.parametrize("target", TARGETS)
def test_eight_threads_thousand_calls_match_single_threaded(convnet, target: str) -> None:
    deployed = convnet(target).deployed
    torch.manual_seed(0)
    inputs = [torch.randn(1 + k % 4, 3, 64, 64) for k in range(DISTINCT)]
    want = [deployed.execute({"x": x})["output"] for x in inputs]
    before = deployed.stats.count
    results = _hammer(lambda x: deployed.execute({"x": x})["output"], inputs)
    assert len(results) == CALLS
    assert deployed.stats.count == before + CALLS
    mismatched = [k for k, got in results if not torch.equal(got, want[k])]
    assert mismatched == [], f"{len(mismatched)} of {CALLS} results differ on {target}"


class _Overlap(Executor):
    """Counts how many calls are inside the engine at the same moment."""

    def __init__(self, thread_safe: bool) -> None:
        super().__init__()
        self.thread_safe = thread_safe
        self._guard = threading.Lock()
        self.active = self.most = 0

    def run(self, feeds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        with self._guard:
            self.active += 1
            self.most = max(self.most, self.active)
        time.sleep(0.0005)
        with self._guard:
            self.active -= 1
        return {"y": feeds["x"] * 2}


def _stub(thread_safe: bool) -> fxdeploy.Deployed:
    spec = {"name": "x", "dtype": "float32", "shape": [2]}
    manifest = {
        "target": "stub", "inputs": [spec], "outputs": [dict(spec, name="y")], "dims": {},
        "output_leaves": [{"kind": "tensor", "name": "y"}], "output_tree": {"kind": "leaf"},
    }
    return fxdeploy.Deployed(_Overlap(thread_safe), manifest, Path("."))


@pytest.mark.parametrize("thread_safe", [False, True])
def test_deployed_serializes_only_engines_that_are_not_thread_safe(thread_safe: bool) -> None:
    deployed = _stub(thread_safe)
    inputs = [torch.full((2,), float(k)) for k in range(DISTINCT)]
    results = _hammer(deployed, inputs)
    assert all(torch.equal(got, inputs[k] * 2) for k, got in results)
    assert deployed.stats.count == CALLS
    serialized = deployed.executor.most == 1
    assert serialized is not thread_safe, f"at most {deployed.executor.most} calls were in the engine at once"
