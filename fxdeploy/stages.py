"""Where a long call is: ``lower()`` and the benchmark announce their stages to whoever listens.

A listener is set for a block of code (``listening``) in a context variable, so it follows the
caller's thread and task and nothing else; with none set, announcing a stage costs one lookup.
The command line listens to draw progress and to write a report when a lowering fails; the
library itself prints nothing. This is observation only: no pass, lowering or check reads it,
and what a call computes is the same with a listener or without.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

Status = Literal["start", "done", "failed"]


@dataclass(frozen=True)
class StageEvent:
    name: str
    """the stage: "capture", "passes", "lowering", "loading", "check against eager", a bench step..."""
    status: Status
    target: str = ""
    """the target being lowered ("" outside a lowering)."""
    seconds: float = 0.0
    """for "done" and "failed": how long the stage ran."""
    error: str = ""
    """for "failed": the error's first line."""


Listener = Callable[[StageEvent], None]
_LISTENERS: contextvars.ContextVar[tuple[Listener, ...]] = contextvars.ContextVar("fxdeploy_stage_listeners",
                                                                                  default=())


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Send every stage announced inside this block (in this context) to ``listener`` too; blocks
    nest, each listener hearing what is announced inside its own."""
    token = _LISTENERS.set((*_LISTENERS.get(), listener))
    try:
        yield
    finally:
        _LISTENERS.reset(token)


def heard() -> bool:
    """Whether anyone listens here (a caller with its own plain output leaves it to them)."""
    return bool(_LISTENERS.get())


def announce(event: StageEvent) -> None:
    for listener in _LISTENERS.get():
        listener(event)


@contextlib.contextmanager
def stage(name: str, target: str = "") -> Iterator[None]:
    """Announce ``name``'s start, then its end: done with its time, or failed with the error."""
    if not _LISTENERS.get():
        yield
        return
    start = time.perf_counter()
    announce(StageEvent(name, "start", target))
    try:
        yield
    except BaseException as exc:
        first = str(exc).strip().splitlines()
        error = f"{type(exc).__name__}: {first[0] if first else ''}"
        announce(StageEvent(name, "failed", target, time.perf_counter() - start, error))
        raise
    announce(StageEvent(name, "done", target, time.perf_counter() - start))
