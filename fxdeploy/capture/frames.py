"""Where an exception happened, in the user's frames: torch's, fxdeploy's and Python's own files
left out. A strict capture (dynamo) prints the user's stack in its message; a non-strict one runs
the model's Python, so the traceback holds it."""

from __future__ import annotations

import linecache
import os
import re
import sys
import sysconfig
import traceback
from collections.abc import Iterable
from dataclasses import dataclass

import torch

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_SECTIONS = ("from user code:", "User Stack (most recent call last):")
_LIBRARIES = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(os.path.dirname(__file__)) + os.sep)
_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep
_PACKAGES = tuple({sysconfig.get_paths()[k] + os.sep for k in ("purelib", "platlib")})


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} in {self.func}"


def qualified(frame: Frame) -> str:
    """``module.Class.function`` for a frame, found among the loaded modules; its name otherwise."""
    for name, module in list(sys.modules.items()):
        if os.path.abspath(getattr(module, "__file__", None) or "") != os.path.abspath(frame.file):
            continue
        candidates = []
        for owner in [module, *(v for v in vars(module).values() if isinstance(v, type))]:
            for value in vars(owner).values():
                code = getattr(getattr(value, "__func__", value), "__code__", None)
                if code is not None and code.co_name == frame.func and code.co_filename == frame.file:
                    candidates.append((code.co_firstlineno, getattr(value, "__qualname__", frame.func)))
        fitting = [c for c in candidates if c[0] <= frame.line]
        if fitting:
            return f"{name}.{max(fitting)[1]}"
    return frame.func


def chain(exc: BaseException | None) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from."""
    chain: list[BaseException] = []
    while exc is not None and exc not in chain:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return chain


def reached(frames: Iterable[Frame]) -> list[Frame]:
    """The user's frames that fxdeploy's call reached (the model's code), outermost first: those
    before fxdeploy's first frame (the script, notebook or test that called it) are not the model's,
    and torch's, fxdeploy's and Python's own go too."""
    frames = list(frames)
    first = next((i for i, f in enumerate(frames) if f.file.startswith(_LIBRARIES[1])), 0)
    return [f for f in frames[first:] if not internal(f.file)]


def section_frames(text: str) -> list[Frame]:
    """The frames of dynamo's last user-stack section (strict capture), outermost first."""
    start = max((text.rfind(s) for s in _SECTIONS), default=-1)
    if start < 0:
        return []
    frames = []
    for line in text[start:].splitlines()[1:]:
        if line.strip() and not line[0].isspace():
            break
        if match := _FRAME.match(line):
            frames.append(Frame(match["file"], int(match["line"]), match["func"]))
    return frames


def text_frames(text: str) -> list[Frame]:
    """The frames of a formatted stack (a node's ``stack_trace``), outermost first."""
    return [Frame(m["file"], int(m["line"]), m["func"]) for line in text.splitlines() if (m := _FRAME.match(line))]


def traceback_frames(chain: list[BaseException]) -> list[Frame]:
    """The frames Python ran (non-strict capture runs the model's code), outermost first."""
    for exc in chain:
        ran = (Frame(t.f_code.co_filename, n, t.f_code.co_name) for t, n in traceback.walk_tb(exc.__traceback__))
        user = [f for f in ran if not internal(f.file)]
        if user:
            return user
    return []


def internal(file: str) -> bool:
    """torch's, fxdeploy's or Python's own file: no user changes a line there."""
    stdlib = file.startswith(_STDLIB) and not file.startswith(_PACKAGES)
    return file.startswith(_LIBRARIES) or stdlib or file.startswith("<")


def caller_of_package(frames: list[Frame]) -> Frame | None:
    """Where the innermost frame, an installed package's line or fxdeploy's (torchvision's ``nms``,
    ``fxdeploy.ops.nms``), was called from in the user's own code; None where the innermost frame
    is the user's or no such caller ran."""
    theirs = [f.file.startswith(_PACKAGES) or internal(f.file) for f in frames]
    if not frames or not theirs[-1]:
        return None
    return next((f for f, other in zip(reversed(frames), reversed(theirs), strict=True) if not other), None)


def described(frames: list[Frame]) -> str:
    """The innermost frame as ``file:line (`code`)``, with the user's line that called it where it
    is a package's or fxdeploy's."""
    if not frames:
        return "an unknown line"
    caller = caller_of_package(frames)
    called = "" if caller is None else f", called from {caller.file}:{caller.line} (`{source(caller)}`)"
    return f"{frames[-1].file}:{frames[-1].line} (`{source(frames[-1])}`){called}"


def source(frame: Frame) -> str:
    return linecache.getline(frame.file, frame.line).strip()
