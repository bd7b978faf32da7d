"""The branches that the example's values decided in a capture with real values, read from torch's
own record of each decision, and a refusal of those that read a tensor's value.

Where the example decides a branch (``exporting._decided_by_example``), torch logs each decision it
took from the real values (``propagate_real_tensors evaluate_expr(u0 > 50) -> False``) and turns it
into a runtime assert. That assert does not always reach the graph: a decision on a float
(``if x.max().item() > 50``) gets none, and dynamo's dead-code elimination drops the ``item`` an
int's assert reads when only Python used it. The log line is the one record that stays. A decision
on a selection's size (a size-like symbol: the rows a mask or an NMS kept) is fxdeploy's to make and
lower() checks it; one on a tensor's value (``t.item()``, ``int(t)``, ``float(t)``) would hold for the
example only, and is refused naming its line.
"""

from __future__ import annotations

import contextlib
import logging
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import sympy
import torch

from fxdeploy.capture.branches import Guard, explain
from fxdeploy.capture.frames import Frame, reached, source
from fxdeploy.errors import CaptureError

_LOGGER = "torch.fx.experimental.symbolic_shapes"
_DECISION = "propagate_real_tensors evaluate_expr"


class ValueDecided(CaptureError):
    """The example's values decided a branch on a tensor's value; the message names its line."""


@dataclass(frozen=True)
class Decision:
    expression: sympy.Basic
    result: Any
    frames: tuple[Frame, ...]
    """The user's frames, outermost first (Python's stack, or dynamo's record of the user's)."""


class _Recorder(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.decisions: list[Decision] = []

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.msg, str) and record.msg.startswith(_DECISION) and len(record.args or ()) == 2:
            expression, result = record.args  # type: ignore[misc]
            self.decisions.append(Decision(expression, result, _user_frames()))


def _user_frames() -> tuple[Frame, ...]:
    # dynamo runs the user's bytecode itself, so its tracing context holds the user's stack; a
    # non-strict capture runs the model's Python, so the interpreter's stack does
    stack = torch._guards.TracingContext.extract_stack() or traceback.extract_stack()
    return tuple(reached(Frame(f.filename, f.lineno or 0, f.name) for f in stack))


@contextlib.contextmanager
def recorded() -> Iterator[list[Decision]]:
    """The decisions torch logs inside the block; its logger is heard only here (its own handlers,
    torch's console ones among them, are held aside meanwhile), never on the console."""
    logger = logging.getLogger(_LOGGER)
    recorder = _Recorder()
    level, propagate, handlers = logger.level, logger.propagate, list(logger.handlers)
    logger.handlers = [recorder]
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    try:
        yield recorder.decisions
    finally:
        logger.handlers = handlers
        logger.setLevel(level)
        logger.propagate = propagate


def refuse_values(decisions: list[Decision], ep: torch.export.ExportedProgram, model: Any) -> None:
    """Raise ``ValueDecided`` for the first decision that read a tensor's value: a float symbol, or
    an int one torch does not know to be a size."""
    sizes = _size_like(_shape_env(ep))
    for decision in decisions:
        values = sorted(
            s.name for s in decision.expression.free_symbols
            if s.name.startswith("zuf") or (s.name.startswith("u") and s not in sizes)
        )
        if not values:
            continue
        guard = Guard(str(decision.expression), tuple(values), decision.frames)
        lines = [f"fxdeploy could not capture {type(model).__name__}:", *explain(guard)]
        lines.append(f"  (the example took the side where {decision.expression} is {decision.result}; an artifact "
                     "would take it for every input)")
        raise ValueDecided("\n".join(lines))


class CountFixed(ValueDecided):
    """The example's values decided branches on a data-dependent size until they fixed it."""


def refuse_fixed_counts(decisions: list[Decision], ep: torch.export.ExportedProgram, model: Any) -> None:
    """Raise ``CountFixed`` where the branches the example decided fixed a selection's size at one
    number (``while len(keep) > 3: keep = keep[:-1]`` decides ``u0 > 3`` ... ``u0 - 22 > 3`` and
    torch then replaces u0 by 25): the graph keeps no size to check them against, and would
    compute the example's case for every input."""
    env = _shape_env(ep)
    replaced = getattr(env, "replacements", {})
    for decision in decisions:
        fixed = {s: replaced[s] for s in decision.expression.free_symbols  # a count's (unbacked), not a dim's
                 if s.name.startswith("u") and getattr(replaced.get(s), "is_Integer", False)
                 and not _head_read(s, decisions, env)}
        if not fixed:
            continue
        symbol, value = next(iter(fixed.items()))
        branches = [d for d in decisions if symbol in d.expression.free_symbols]
        site = next((d.frames[-1] for d in branches if d.frames), None)
        where = f" at {site.file}:{site.line} (`{source(site)}`)" if site else ""
        recorded = ", ".join(f"`{d.expression}`" for d in branches[:3]) + (", ..." if len(branches) > 3 else "")
        what = (f"fxdeploy could not capture {type(model).__name__}: Python read how many rows a data-dependent op "
                f"(an NMS, a mask, nonzero, unique) returned{where}, and the example's values decided it "
                f"({len(branches)} decision(s), torch recorded {recorded}) until they fixed that count at {value}. "
                "One artifact serves every input, so it would compute the example's count for all of them. ")
        read = any(d.expression == symbol for d in branches)  # the count itself made a Python int
        raise CountFixed(what + (_READ if read else "") + _TENSOR_OPS)


_READ = ("len(x), int(n) and a for loop over a tensor make the count a Python int, which fixes it: `if not len(x): "
         "continue` does so, where `if not x.shape[0]: continue` does not. Write x.shape[0] where len(x) stood (a "
         "branch on it is checked against eager where the selection keeps no rows). ")
_TENSOR_OPS = ("Write a loop or branch on the count with tensor ops: a mask of the rows to keep, torch.where on the "
               "count, keep[:k] with a fixed k; for an NMS per class of labels.unique(), one "
               "batched_nms(boxes, scores, labels, iou_threshold).")


def _head_read(symbol: Any, decisions: list[Decision], env: Any) -> bool:
    """Whether ``symbol`` is torch 2.11's own symbol for the head of selected rows (``nms(...)[:45]``:
    ``u2 <= u1``, ``u1`` not fixed) and was only read (``len(pred)``), never compared: the padding
    computes that head again from its padded input, and the ops that read its count follow or are
    refused (``docs/internals.md``, "Data-dependent sizes that torch names anew")."""
    if any(symbol in d.expression.free_symbols and d.expression != symbol for d in decisions):
        return False
    replaced = getattr(env, "replacements", {})
    free = _size_like(env, lambda s: getattr(replaced.get(s), "is_Integer", False))
    kept = (getattr(env, "deferred_runtime_asserts", None) or {}).get(symbol, ())
    return any(_at_most(a.expr, symbol, free) for a in kept)


def _shape_env(ep: torch.export.ExportedProgram) -> Any:
    mode = torch._guards.detect_fake_mode([n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder"])
    return getattr(mode, "shape_env", None)


def _size_like(env: Any, leave_out: Callable[[Any], bool] = lambda symbol: False) -> set[sympy.Symbol]:
    """The symbols of sizes: torch's size-like ones, and each one torch asserts is at most such a
    size (torch 2.11 makes the head ``[:45]`` of an NMS's rows a new symbol ``u2 <= u1``); none
    ``leave_out`` is true of."""
    sizes = {s for s in getattr(env, "size_like", ()) if not leave_out(s)}
    asserts = getattr(env, "deferred_runtime_asserts", None) or {}
    grown = True
    while grown:
        grown = False
        for symbol, kept in asserts.items():
            if symbol not in sizes and not leave_out(symbol) and any(_at_most(a.expr, symbol, sizes) for a in kept):
                sizes.add(symbol)
                grown = True
    return sizes


def _at_most(expr: Any, symbol: Any, sizes: set[Any]) -> bool:
    """Whether ``expr`` is ``symbol <= e`` with ``e`` of sizes only."""
    bound = expr.rhs.free_symbols if isinstance(expr, sympy.LessThan) and expr.lhs == symbol else set()
    return bool(bound) and bound <= sizes
