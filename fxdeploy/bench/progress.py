"""Progress for long benchmark runs: each step announced as a stage (``fxdeploy.stages``), which the
command line draws on a terminal; with no one listening, plain lines for logs and CI."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from fxdeploy.stages import StageEvent, announce, heard


class Progress:
    def __init__(self, total: int, *, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.total = max(1, total)
        self.done = 0
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        self._current: tuple[str, float] | None = None

    def step(self, label: str) -> None:
        self.done = min(self.total, self.done + 1)
        if not self.enabled:
            return
        now = time.perf_counter()
        if heard():
            self._finish(now)
            name = f"bench [{self.done}/{self.total}] {label}"
            announce(StageEvent(name, "start"))
            self._current = (name, now)
            return
        self.stream.write(f"bench [{self.done}/{self.total}] {now - self.start:.0f}s {label}\n")
        self.stream.flush()

    def close(self) -> None:
        self._finish(time.perf_counter())

    def _finish(self, now: float) -> None:
        if self._current is not None:
            name, started = self._current
            announce(StageEvent(name, "done", seconds=now - started))
            self._current = None
