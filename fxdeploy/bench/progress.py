"""Progress for long benchmark runs: a ``\\r`` bar on a terminal, plain lines in logs and CI."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, *, enabled: bool = True, stream: TextIO | None = None, width: int = 30) -> None:
        self.total = max(1, total)
        self.done = 0
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.width = width
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.perf_counter()

    def step(self, label: str) -> None:
        self.done = min(self.total, self.done + 1)
        if not self.enabled:
            return
        elapsed = time.perf_counter() - self.start
        if self.tty:
            filled = self.width * self.done // self.total
            bar = "#" * filled + "." * (self.width - filled)
            self.stream.write(f"\r[{bar}] {self.done}/{self.total} {elapsed:5.0f}s {label[:40]:<40}")
            if self.done == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(f"bench [{self.done}/{self.total}] {elapsed:.0f}s {label}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty and self.done < self.total:
            self.stream.write("\n")
            self.stream.flush()
