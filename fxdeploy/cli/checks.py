"""The command line's arguments, checked before any work: each bad one is one line and exit code 2.

Values are checked as argparse reads them (the ``type=`` functions here), so a mistake names its
argument, the value and what is expected before a model is imported, let alone lowered. What
depends on several arguments or on the registry (targets, settings) is checked by ``UsageError``
raisers that the commands call first.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn


class UsageError(ValueError):
    """A bad command line found after parsing: one line, exit code 2, nothing done."""


class Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line (argparse prints the usage first, over several)."""

    def error(self, message: str) -> NoReturn:
        one_line = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {one_line} (see {self.prog} --help)\n")


def add_command(sub: Any, name: str, sentence: str) -> argparse.ArgumentParser:
    """A subcommand whose one sentence is both its line in ``fxdeploy --help`` and its own description."""
    description = sentence[:1].upper() + sentence[1:] + "."
    parser: argparse.ArgumentParser = sub.add_parser(name, help=sentence, description=description)
    return parser


def int_at_least(low: int) -> Callable[[str], int]:
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected an integer >= {low}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
        return value

    convert.__name__ = "int"  # argparse names the type in its own messages
    return convert


def float_at_least(low: float, *, above: bool = False, high: float | None = None) -> Callable[[str], float]:
    """A float in [low, high] (``above``: strictly greater than ``low``)."""
    wanted = f"a number {'>' if above else '>='} {low:g}" + (f" and <= {high:g}" if high is not None else "")

    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected {wanted}") from None
        if not (value > low if above else value >= low) or (high is not None and value > high) or value != value:
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {text}")
        return value

    convert.__name__ = "float"
    return convert


def output_dir(text: str) -> Path:
    """A directory fxdeploy will write (and may replace): not a file, under no file, writable."""
    return _writable(text, kind="directory")


def output_file(text: str) -> Path:
    """A file fxdeploy will write: not a directory, under no file, writable."""
    return _writable(text, kind="file")


def _writable(text: str, kind: str) -> Path:
    path = Path(text)
    if not text:
        raise argparse.ArgumentTypeError(f"expected a {kind} path, got ''")
    if kind == "directory" and path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is an existing file; expected a directory to write the artifact "
                                         "into (new, or an artifact to replace)")
    if kind == "file" and path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory; expected a file path")
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r}: {parent} is a file, so nothing can be written under it; "
                                         f"expected a {kind} path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text!r}: {parent} is not writable; expected a {kind} path you can write")
    return path


def existing_file(text: str) -> Path:
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text!r} {'is a directory' if path.is_dir() else 'does not exist'}; "
                                         "expected an existing file")
    return path


def artifact_dir(text: str) -> Path:
    """A saved artifact: a directory (its manifest and files are checked when it is loaded)."""
    path = Path(text)
    if not path.is_dir():
        what = "is a file" if path.exists() else "does not exist"
        raise argparse.ArgumentTypeError(f"{text!r} {what}; expected an artifact directory (from fxdeploy lower)")
    return path


def model_spec(text: str) -> str:
    """``file.py:factory`` or ``package.module:factory``: the shape, and that a named file exists."""
    location, colon, name = text.rpartition(":")
    if not colon or not location or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r}: expected file.py:factory or package.module:factory, "
                                         "the factory a Python name")
    if location.endswith(".py") and not Path(location).is_file():
        raise argparse.ArgumentTypeError(f"{text!r}: the model file {location} does not exist")
    if not location.endswith(".py") and not all(p.isidentifier() for p in location.split(".")):
        raise argparse.ArgumentTypeError(f"{text!r}: {location!r} is neither a .py file nor a dotted module name")
    return text


def target_names(text: str, *, allow: Sequence[str] = ()) -> list[str]:
    """Registered target names (or one of ``allow``), comma separated; unknown ones are a UsageError."""
    import fxdeploy

    names = [t.strip() for t in text.split(",") if t.strip()]
    statuses = fxdeploy.targets()
    unknown = [n for n in names if n not in statuses and n not in allow]
    if not names or unknown:
        known = [*sorted(statuses), *allow]
        raise UsageError(f"unknown target(s) {unknown or [text]}; registered: {known}")
    return names


def require_target(name: str, precision: str) -> None:
    """The target can run here, at this precision: said before the model is imported."""
    from fxdeploy.errors import FxDeployError
    from fxdeploy.targets import check_precision, get_target

    try:
        target = get_target(name)
        target.require()
        check_precision(target, precision)
    except FxDeployError as exc:
        raise UsageError(f"argument --target: {exc}") from exc


def fail(prog: str, message: str) -> int:
    """Print a usage error on one line; the exit code."""
    print(f"{prog}: error: {' '.join(str(message).split())}", file=sys.stderr)
    return 2
