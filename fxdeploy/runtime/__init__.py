"""Runtime layer: one Executor per runtime, each importing its runtime package lazily."""

from fxdeploy.runtime.executor import Executor, Stats

__all__ = ["Executor", "Stats"]
