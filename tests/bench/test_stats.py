"""Summary statistics and the measuring loop, on known samples (no timing assertions)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from fxdeploy.bench import timing
from fxdeploy.bench.timing import Budget, measure_interleaved, round_medians, summarize


def test_percentiles_on_known_samples() -> None:
    stats = summarize(list(range(1, 101)), batch=4)
    assert stats["count"] == 100
    assert stats["median"] == pytest.approx(50.5)
    assert stats["p90"] == pytest.approx(90.1)  # linear interpolation, as numpy.percentile
    assert stats["p99"] == pytest.approx(99.01)
    assert (stats["min"], stats["max"], stats["mean"]) == (1.0, 100.0, 50.5)
    assert stats["std"] == pytest.approx(np.std(np.arange(1, 101), ddof=1))
    assert stats["throughput"] == pytest.approx(4 * 1000 / 50.5)


def test_steady_samples_do_not_warn(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="fxdeploy.bench.timing"):
        stats = summarize([10.0, 10.1, 9.9, 10.0, 10.05])
    assert stats["cv"] < 0.05 and stats["cv_warning"] is False
    assert not caplog.records


def test_noisy_samples_warn_and_flag(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="fxdeploy.bench.timing"):
        stats = summarize([10.0, 10.0, 10.0, 20.0])
    assert stats["cv"] == pytest.approx(np.std([10, 10, 10, 20], ddof=1) / 12.5)
    assert stats["cv_warning"] is True
    assert "CV 40.0% > 5%" in caplog.text


def test_single_sample_and_empty() -> None:
    stats = summarize([3.0])
    assert stats["median"] == stats["p99"] == 3.0 and stats["std"] == 0.0 and not stats["cv_warning"]
    with pytest.raises(ValueError, match="at least one sample"):
        summarize([])


def test_budget_minimum_runs_are_respected() -> None:
    log: list[str] = []
    budget = Budget(warmup_s=0.0, warmup_runs=3, min_time_s=0.0, min_runs=10, rounds=5)
    samples, failures = measure_interleaved({"a": lambda: log.append("a"), "b": lambda: log.append("b")}, budget)
    assert failures == {}
    assert len(samples["a"]) == len(samples["b"]) == 10  # 5 rounds of ceil(10 / 5)
    measured = log[6:]  # after the warm-up runs, which are not samples: a a a b b b
    takeovers = [now for before, now in zip(["b", *measured], measured, strict=False) if now != before]
    assert len(takeovers) >= 2  # each contender took over at least once
    for name in "ab":  # plus one untimed call each time a contender takes over from the other
        assert log.count(name) == 3 + 10 + takeovers.count(name)


def test_the_first_call_after_a_switch_is_not_a_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    """The call that takes over from another contender pays for the other's spinning threads and
    cold caches (1.2-1.4x on ONNX Runtime sessions: benchmarks/switch_cost.py); it is not timed."""

    class Clock:
        ns = 0

        @classmethod
        def perf_counter_ns(cls) -> int:
            return cls.ns

        @classmethod
        def perf_counter(cls) -> float:
            return cls.ns / 1e9

    monkeypatch.setattr(timing, "time", Clock)  # this module's clock only, restored after the test
    last: list[str] = [""]

    def call(name: str) -> None:
        Clock.ns += 100_000_000 if last[0] != name else 1_000_000  # 100 ms after a switch, else 1 ms
        last[0] = name

    budget = Budget(warmup_s=0.0, warmup_runs=1, min_time_s=0.0, min_runs=6, rounds=3)
    samples, failures = measure_interleaved({n: (lambda n=n: call(n)) for n in "abc"}, budget)
    assert failures == {}
    assert {n: sorted(set(s)) for n, s in samples.items()} == {n: [1.0] for n in "abc"}


def test_a_failing_contender_is_reported_not_raised() -> None:
    def broken() -> None:
        raise RuntimeError("engine exploded")

    budget = Budget(warmup_s=0.0, warmup_runs=1, min_time_s=0.0, min_runs=2, rounds=1)
    samples, failures = measure_interleaved({"ok": lambda: None, "broken": broken}, budget)
    assert list(samples) == ["ok"] and len(samples["ok"]) == 2
    assert failures == {"broken": "RuntimeError: engine exploded"}


@pytest.mark.parametrize("bad", [{"min_runs": 0}, {"rounds": 0}, {"warmup_s": -1.0}])
def test_budget_rejects_nonsense(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Budget(**bad)  # type: ignore[arg-type]


def test_round_ends_split_the_samples_by_round() -> None:
    budget = Budget(warmup_s=0.0, warmup_runs=0, min_time_s=0.0, min_runs=12, rounds=4)
    ends: dict[str, list[int]] = {}
    samples, _ = measure_interleaved({"a": lambda: None, "b": lambda: None}, budget, round_ends=ends)
    assert ends == {"a": [3, 6, 9, 12], "b": [3, 6, 9, 12]}  # ceil(12 / 4) runs a round
    assert len(samples["a"]) == 12


def test_round_medians_take_each_round_apart() -> None:
    samples = [1.0, 2.0, 3.0, 10.0, 30.0, 20.0, 5.0]
    assert round_medians(samples, [3, 6, 7]) == [2.0, 20.0, 5.0]
    assert round_medians(samples, [3, 3, 7]) == [2.0, 15.0]  # an empty round gives no median


def test_a_contender_failing_mid_run_keeps_only_its_finished_rounds() -> None:
    calls = {"n": 0}

    def breaks_later() -> None:
        calls["n"] += 1
        if calls["n"] > 5:
            raise RuntimeError("engine lost")

    budget = Budget(warmup_s=0.0, warmup_runs=0, min_time_s=0.0, min_runs=9, rounds=3)
    ends: dict[str, list[int]] = {}
    _, failures = measure_interleaved({"x": breaks_later}, budget, round_ends=ends)
    assert "x" in failures and ends == {"x": [3]}
