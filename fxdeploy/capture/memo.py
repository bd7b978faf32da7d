"""One torch.export per model and example in a process: lowering it again, for another target or
with other settings, starts from the same exported program.

torch.export is most of a lowering's time (a detector's capture traces it twice: a first trace
stops at a data-dependent branch, a second lets the example decide it). ``lower(model, x,
target=...)`` for ONNX Runtime, then OpenVINO, then ncnn, would trace the same model three
times; ``export`` here traces it once and hands the same program to the later calls.

A later call reuses the program only where it would get the same one:

- the same model object (the program holds its parameter tensors), with the same fingerprint
  (``fxdeploy.cache.fingerprint.model_parts``: every parameter and buffer's bytes, every
  submodule's class, source file and plain attributes, the substitutions), so a weight or a
  threshold changed in between is traced again;
- the same plain class-level values of those classes (a flag set on a class);
- the same example *values* (a capture may let them decide a size branch), structure, dtypes and
  shapes, the same dynamic shapes, capture mode, grad, inference and autocast modes.

What no fingerprint sees (a module-level global the forward reads, a library function replaced
in between) is what ``lower()``'s check against the model, as it is now, catches.

Nothing downstream changes the program's graph: ``ExportedProgram.module()`` copies it before any
pass runs, and lowering only reads it. Its shape env is shared, and a retrace may leave data-
dependent sizes pending there; a later call starts with none (``_settle``). A failure the trace
raises (a model that fixes its batch) is kept as well, with its causes, and raised again. The log
lines the trace wrote are written again, so a second lowering says what the first said. An entry
lives while its model does, and at most ``MAX_ENTRIES`` are kept.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fxdeploy.cache.fingerprint import model_parts, tensor_digest
from fxdeploy.capture import exporting, substitution
from fxdeploy.errors import CaptureError

logger = logging.getLogger(__name__)
MAX_ENTRIES = 2
Result = tuple[torch.export.ExportedProgram, str, list[str]]


@dataclass
class _Entry:
    model: weakref.ref
    result: Result | None
    error: BaseException | None
    records: list[logging.LogRecord]


@dataclass
class Stats:
    hits: int = 0
    misses: int = 0


_ENTRIES: OrderedDict[str, _Entry] = OrderedDict()
_FUNCTIONAL: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.RLock()  # re-entrant: a weakref callback (``_drop``) may run inside a locked block
STATS = Stats()


def export(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], shapes: Any,
    subs: list[substitution.Substitution], mode: str, real_values: bool = False, batch: str | None = None,
    deferred: bool = False,
) -> Result:
    """``exporting.export`` of these arguments, or the program an earlier call with the same ones got."""
    key = _key(model, args, kwargs, shapes, subs, (mode, real_values, batch, deferred))
    entry = _lookup(key, model) if key is not None else None
    if entry is not None:
        STATS.hits += 1
        _replay(entry.records)
        if entry.error is not None:
            raise _bare(entry.error)
        assert entry.result is not None
        ep, mode, applied = entry.result
        _settle(ep)
        return ep, mode, list(applied)
    STATS.misses += 1
    with _recording() as records:
        try:
            result = exporting.export(model, args, kwargs, shapes, subs, mode, real_values, batch, deferred)
        except CaptureError as exc:
            _store(key, model, None, exc, records)
            raise
    _store(key, model, (result[0], result[1], list(result[2])), None, records)
    return result


def functional(
    ep: torch.export.ExportedProgram, functionalize: Callable[[torch.export.ExportedProgram], Any]
) -> torch.export.ExportedProgram:
    """``functionalize(ep)``, once per program (its retrace is a second export's time)."""
    with _LOCK:
        done = _FUNCTIONAL.get(ep)
    if done is None:
        done = functionalize(ep)
        if done is not ep:  # kept while ``ep`` lives (an entry holding ``ep`` to itself would never go)
            with _LOCK:
                _FUNCTIONAL[ep] = done
    return done


def clear() -> None:
    with _LOCK:
        _ENTRIES.clear()
        _FUNCTIONAL.clear()


def _key(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], shapes: Any, subs: list[Any],
         options: tuple[Any, ...]) -> str | None:
    try:
        parts = model_parts(model, args, kwargs, shapes, subs)
        leaves = pytree.tree_leaves((args, kwargs))
        parts["values"] = [tensor_digest(x) if isinstance(x, torch.Tensor) else None for x in leaves]
        parts["class_attributes"] = _class_attributes(model)
        parts["options"] = [repr(option) for option in options]
        parts["modes"] = [torch.is_grad_enabled(), torch.is_inference_mode_enabled(), torch.is_autocast_enabled()]
        return hashlib.sha256(json.dumps(parts, sort_keys=True, default=repr).encode()).hexdigest()
    except Exception as exc:  # noqa: BLE001 - a model it cannot fingerprint (sparse weights, an odd attribute)
        logger.debug("capture is not memoized: %s: %s", type(exc).__name__, exc)
        return None


def _class_attributes(model: torch.nn.Module) -> list[Any]:
    """The plain class-level values of every submodule's classes (a flag such as ``Detect.export``,
    set on the class rather than the instance, changes what forward traces)."""
    classes = {cls for module in model.modules() for cls in type(module).__mro__ if cls.__module__ != "builtins"}
    plain = (bool, int, float, str, type(None), tuple)
    return sorted(
        [f"{cls.__module__}.{cls.__qualname__}", name, repr(value)]
        for cls in classes if not cls.__module__.startswith("torch.")
        for name, value in vars(cls).items() if not name.startswith("__") and isinstance(value, plain)
    )


def _lookup(key: str, model: torch.nn.Module) -> _Entry | None:
    with _LOCK:
        entry = _ENTRIES.get(key)
        if entry is None or entry.model() is not model:
            return None
        _ENTRIES.move_to_end(key)
        return entry


def _store(key: str | None, model: torch.nn.Module, result: Result | None, error: CaptureError | None,
           records: list[logging.LogRecord]) -> None:
    if key is None:
        return
    with _LOCK:
        kept = _bare(error) if error is not None else None
        _ENTRIES[key] = _Entry(weakref.ref(model, lambda _: _drop(key)), result, kept, list(records))
        _ENTRIES.move_to_end(key)
        while len(_ENTRIES) > MAX_ENTRIES:
            _ENTRIES.popitem(last=False)


def _bare(error: BaseException, depth: int = 0) -> BaseException:
    """A copy of ``error`` (its message and attributes) and of its causes, without tracebacks:
    their frames hold the model and the example, which an entry must not keep alive. The causes
    stay, since capture reads them (torch.export's suggested fixes, a batch fixed by a loop). Each
    raise gets its own copy, so raising one does not tie the kept error to the raiser's frames."""
    try:  # not rebuilt by __init__, whose signature varies
        copied = type(error).__new__(type(error), *error.args)
        copied.args = error.args
        copied.__dict__.update(vars(error))
    except Exception:  # noqa: BLE001 - a class whose __new__ takes other arguments: its words are kept
        copied = RuntimeError(f"{type(error).__name__}: {error}")
    if error.__cause__ is not None and depth < 8:
        copied.__cause__ = _bare(error.__cause__, depth + 1)
    return copied


def _settle(ep: torch.export.ExportedProgram) -> None:
    """Forget the data-dependent sizes an earlier lowering's retrace left pending in the program's
    shape env (torch.onnx's leaves some): a finished program has none, and the next trace in that
    env refuses to start with any (``PendingUnbackedSymbolNotFound``)."""
    mode = torch._guards.detect_fake_mode([n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder"])
    pending = getattr(getattr(mode, "shape_env", None), "pending_fresh_unbacked_symbols", None)
    if pending:
        pending.clear()


def _drop(key: str) -> None:
    with _LOCK:
        entry = _ENTRIES.get(key)
        if entry is not None and entry.model() is None:
            del _ENTRIES[key]


class _Recorder(logging.Filter):
    """Keeps each record its logger lets through, and lets it through."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return True


@contextmanager
def _recording() -> Iterator[list[logging.LogRecord]]:
    """The records fxdeploy's loggers write inside the block; where they go is unchanged."""
    recorder = _Recorder()
    loggers = [logging.getLogger(name) for name in list(logging.root.manager.loggerDict) if name.startswith("fxdeploy")]
    for each in loggers:
        each.addFilter(recorder)
    try:
        yield recorder.records
    finally:
        for each in loggers:
            each.removeFilter(recorder)


def _replay(records: list[logging.LogRecord]) -> None:
    for record in records:
        writer = logging.getLogger(record.name)
        if writer.isEnabledFor(record.levelno):
            writer.handle(record)
