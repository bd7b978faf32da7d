"""What a command shows on the terminal: its own results and progress, none of the libraries' output.

``quiet`` sends everything torch, dynamo, pnnx and ncnn print to a debug log for the length of a
command: file descriptors 1 and 2 (C++ and child processes write there), the handlers logging
set up before it (they hold the old stream, whose descriptor now points at the log) and Python
warnings. The command's own ``print`` goes to the terminal through new streams on copies of the
old descriptors. ``progress`` draws the stages ``fxdeploy.stages`` announces, with rich, on a
terminal only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from fxdeploy.stages import StageEvent, listening


@contextlib.contextmanager
def quiet(command: str) -> Iterator[Path]:
    """Run the block with the libraries' output in a fresh debug log, whose path it yields."""
    handle, name = tempfile.mkstemp(prefix=f"fxdeploy-{command}-", suffix=".log")
    log = Path(name)
    with os.fdopen(handle, "a", buffering=1, encoding="utf-8", errors="replace") as stream:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        try:
            os.dup2(stream.fileno(), 1)
            os.dup2(stream.fileno(), 2)
            with _terminal_streams(saved), _warnings_to(stream), _debug_logging(stream):
                yield log
        finally:
            for fd, copy in zip((1, 2), saved, strict=True):
                os.dup2(copy, fd)
                os.close(copy)


@contextlib.contextmanager
def _terminal_streams(saved: tuple[int, int]) -> Iterator[None]:
    """sys.stdout/sys.stderr on the terminal again, where they were the descriptors themselves
    (a test's captured streams are not descriptors, and stay as they are)."""
    replaced: list[tuple[str, TextIO]] = []
    for attribute, fd in zip(("stdout", "stderr"), saved, strict=True):
        stream = getattr(sys, attribute)
        if _fileno(stream) == (1 if attribute == "stdout" else 2):
            copy = os.fdopen(os.dup(fd), "w", buffering=1, encoding=stream.encoding, errors="replace")
            replaced.append((attribute, stream))
            setattr(sys, attribute, copy)
    try:
        yield
    finally:
        for attribute, stream in replaced:
            getattr(sys, attribute).close()
            setattr(sys, attribute, stream)


def _fileno(stream: Any) -> int | None:
    try:
        return int(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return None


@contextlib.contextmanager
def _warnings_to(stream: TextIO) -> Iterator[None]:
    """Python warnings of the block into the log, but fxdeploy's own (news to the user: an
    unverified artifact, a narrowed dim) on the terminal in one line (catch_warnings restores the
    filters and ``showwarning`` after)."""

    def show(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None,
             line: str | None = None) -> None:
        stream.write(warnings.formatwarning(message, category, filename, lineno, line))
        if category.__module__.split(".")[0] == "fxdeploy":
            print(f"fxdeploy: warning: {' '.join(str(message).split())}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = show
        yield


@contextlib.contextmanager
def _debug_logging(stream: TextIO) -> Iterator[None]:
    """fxdeploy's own records at DEBUG into the log too: the stages it ran, for a bug report."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    fxdeploy_logger = logging.getLogger("fxdeploy")
    level = fxdeploy_logger.level
    fxdeploy_logger.addHandler(handler)
    fxdeploy_logger.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        fxdeploy_logger.removeHandler(handler)
        fxdeploy_logger.setLevel(level)


@contextlib.contextmanager
def progress(enabled: bool) -> Iterator[None]:
    """Draw the stages announced in the block on stderr, when ``enabled`` and stderr is a terminal."""
    if not enabled or not sys.stderr.isatty():
        yield
        return
    drawer = _StageDrawer(sys.stderr)
    try:
        with listening(drawer):
            yield
    finally:
        drawer.stop()


class _StageDrawer:
    """Each stage a line with a spinner and its elapsed time while it runs, then its final time."""

    def __init__(self, stream: TextIO) -> None:
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.bar = Progress(SpinnerColumn(finished_text="[green]✓"), TextColumn("{task.description}"),
                            TimeElapsedColumn(), console=Console(file=stream), redirect_stdout=False,
                            redirect_stderr=False)
        self.tasks: dict[tuple[str, str], Any] = {}
        self.bar.start()

    def __call__(self, event: StageEvent) -> None:
        label = f"{event.target}: {event.name}" if event.target else event.name
        key = (event.target, event.name)
        if event.status == "start":
            self.tasks[key] = self.bar.add_task(label, total=1)
            return
        task = self.tasks.pop(key, None)
        if task is None:
            return
        if event.status == "failed":
            self.bar.update(task, description=f"[red]✗ {label}: {event.error}")
            self.bar.stop_task(task)
        else:
            self.bar.update(task, completed=1)

    def stop(self) -> None:
        self.bar.stop()
