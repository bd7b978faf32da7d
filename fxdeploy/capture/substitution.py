"""Trace-time substitutions, applied only while fxdeploy captures a model.

A substitution maps a library callable to a tensor-only replacement. fxdeploy never assigns to a
library module or class: plain functions are handed to dynamo's polyfill table for the duration
of one strict capture, and methods are overridden on the model's own instances only. Both are
undone in a ``finally``, so eager behaviour is unchanged after ``lower()`` returns or raises.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import sys
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from fxdeploy.errors import RegistryError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Substitution:
    target: Callable[..., Any]
    replacement: Callable[..., Any]
    unpack: Callable[[Any], Any] | None = None
    """Host-side: turns the deployed model's tensor outputs back into the eager structure."""
    eager_equivalent: bool = False
    """The replacement computes what the target computes in eager inference, only spelt so that
    capture can trace it: lower()'s check then runs the target itself, not the replacement."""

    @property
    def name(self) -> str:
        module = getattr(self.target, "__module__", "?")
        return f"{module}.{getattr(self.target, '__qualname__', repr(self.target))}"

    @property
    def attribute(self) -> str:
        return self.target.__name__

    @property
    def is_method(self) -> bool:
        qualname = getattr(self.target, "__qualname__", "")
        return "." in qualname and not qualname.rsplit(".", 1)[0].endswith("<locals>")


_REGISTRY: dict[Callable[..., Any], Substitution] = {}


def substitute(
    target: Callable[..., Any], *, unpack: Callable[[Any], Any] | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``replacement`` for ``target`` in every later capture. A duplicate is an error."""

    def register(replacement: Callable[..., Any]) -> Callable[..., Any]:
        if target in _REGISTRY:
            raise RegistryError(
                f"a substitution for {Substitution(target, replacement).name} is already registered "
                f"({_REGISTRY[target].replacement.__qualname__}); unregister it first"
            )
        _REGISTRY[target] = Substitution(target, replacement, unpack)
        return replacement

    return register


def unregister(target: Callable[..., Any]) -> None:
    if _REGISTRY.pop(target, None) is None:
        raise RegistryError(f"no substitution is registered for {target!r}")


def registered() -> list[Substitution]:
    return list(_REGISTRY.values())


def resolve(
    extra: dict[Callable[..., Any], Callable[..., Any] | Substitution] | None,
) -> list[Substitution]:
    """Built-ins, then registered ones, then per-call ones (which win over registered ones)."""
    chosen: dict[Callable[..., Any], Substitution] = {s.target: s for s in builtin_substitutions()}
    chosen.update(_REGISTRY)
    for target, value in (extra or {}).items():
        chosen[target] = value if isinstance(value, Substitution) else Substitution(target, value)
    return list(chosen.values())


@contextlib.contextmanager
def on_instances(model: torch.nn.Module, subs: Iterable[Substitution]) -> Iterator[list[str]]:
    """Override substituted methods on the model's own objects; the classes stay untouched."""
    applied: list[tuple[Any, str, bool, Any]] = []
    names: list[str] = []
    try:
        for sub in subs:
            if not sub.is_method:
                continue
            for obj in _reachable_objects(model):
                if getattr(type(obj), sub.attribute, None) is not sub.target:
                    continue
                had = sub.attribute in obj.__dict__
                applied.append((obj, sub.attribute, had, obj.__dict__.get(sub.attribute)))
                obj.__dict__[sub.attribute] = types.MethodType(sub.replacement, obj)
                if sub.name not in names:
                    names.append(sub.name)
        yield names
    finally:
        for obj, attribute, had, previous in reversed(applied):
            if had:
                obj.__dict__[attribute] = previous
            else:
                obj.__dict__.pop(attribute, None)


def _reachable_objects(model: torch.nn.Module) -> Iterator[Any]:
    """Modules of the model and the plain objects they hold (a processor, a post-processor)."""
    seen: set[int] = set()
    for module in model.modules():
        for obj in (module, *module.__dict__.values()):
            if id(obj) in seen or isinstance(obj, (torch.Tensor, type, types.ModuleType)):
                continue
            seen.add(id(obj))
            if hasattr(obj, "__dict__"):
                yield obj


@contextlib.contextmanager
def in_dynamo(subs: Iterable[Substitution]) -> Iterator[list[str]]:
    """Register plain-function substitutions as dynamo polyfills for one strict capture."""
    from fxdeploy.capture import _dynamo_polyfill

    functions = [s for s in subs if not s.is_method and isinstance(s.target, types.FunctionType)]
    with _dynamo_polyfill.scoped({s.target: s.replacement for s in functions}):
        yield [s.name for s in functions]


class SubstitutedCall(Exception):
    """A watched function was called where the watch stops at the first call (``CallWatch.stop``)."""


@dataclass
class CallWatch:
    """Records whether any watched function ran, without changing what runs; with ``stop``, the
    first call raises ``SubstitutedCall`` instead: a capture that must start again in strict mode
    once one is called need not trace the rest of the model first (a detector's NMS comes last)."""

    codes: dict[types.CodeType, str]
    hits: list[str] = field(default_factory=list)
    stop: bool = False

    def __call__(self, frame: types.FrameType, event: str, arg: object) -> None:
        if event == "call":
            name = self.codes.get(frame.f_code)
            if name is not None and name not in self.hits:
                self.hits.append(name)
                if self.stop:
                    raise SubstitutedCall(name)  # CPython unsets the hook; watch_calls restores it after


@contextlib.contextmanager
def watch_calls(subs: Iterable[Substitution], stop: bool = False) -> Iterator[CallWatch]:
    codes = {s.target.__code__: s.name for s in subs if hasattr(s.target, "__code__")}
    watch = CallWatch(codes, stop=stop)
    if not codes:
        yield watch
        return
    previous = sys.getprofile()
    sys.setprofile(watch)
    try:
        yield watch
    finally:
        _restore_profiler(previous)


def traced(subs: list[Substitution], called: list[str]) -> list[Substitution]:
    """The substitutions a capture's traces apply: every method substitution, and the substituted
    functions the model ``called`` when run eagerly on the same example (``CallWatch.hits``). The
    trace runs the model's Python on those values, so it calls what eager called; a function it did
    not call needs no watch, and the watch (a profile hook on every Python and C call) costs a
    non-strict trace twice its time. A function without Python code (a builtin) is never watched,
    so it stays for a strict capture."""
    return [s for s in subs if s.is_method or s.name in called or not hasattr(s.target, "__code__")]


def _restore_profiler(previous: object) -> None:
    """Give the thread's profile hook back. A Python hook is a callable; a C profiler (``cProfile``,
    which ``python -m cProfile`` runs everything under) shows as its ``Profile`` object, which
    ``sys.setprofile`` cannot take back ("'Profile' object is not callable"): it reinstalls itself."""
    if previous is None or callable(previous):
        sys.setprofile(previous)
        return
    sys.setprofile(None)
    enable = getattr(previous, "enable", None)
    if callable(enable):
        enable()


# The substitutions fxdeploy always applies: the ecosystem's NMS functions. torchvision is
# optional: where it is installed (and imports), ``torchvision.ops.batched_nms`` is traced as
# fxdeploy's op; ``torchvision.ops.nms`` is traced as the ``torchvision::nms`` op node, which the
# ``substitute_nms`` pass rewrites. Where torchvision is missing, or is a build that does not import
# against this torch, there is nothing to substitute.


def _batched_nms(
    boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor, iou_threshold: float
) -> torch.Tensor:
    from fxdeploy import ops

    return ops.batched_nms(boxes, scores, idxs, iou_threshold)


@functools.cache
def torchvision_ops() -> object | None:
    if importlib.util.find_spec("torchvision") is None:
        return None
    try:
        import torchvision.ops
    except Exception as exc:  # a CUDA-only wheel raises at import against CPU torch
        logger.info("torchvision is installed but does not import (%s); no NMS to substitute", exc)
        return None
    return torchvision.ops


def builtin_substitutions() -> list[Substitution]:
    from fxdeploy.capture.nested_encoder import encoder_forward

    # nn.TransformerEncoder's padded batch: torch.export takes its dense path, eager inference the
    # nested one, which zeros the padded positions (nested_encoder.py).
    builtin = [Substitution(torch.nn.TransformerEncoder.forward, encoder_forward, eager_equivalent=True)]
    tv_ops = torchvision_ops()
    if tv_ops is None:
        return builtin
    # torchvision.ops.nms is not substituted: it calls the torchvision::nms op, whose node the
    # substitute_nms pass rewrites, so the fast non-strict capture takes it as it is (a function
    # substitution needs dynamo, which cannot trace Ultralytics' time.time() around its NMS).
    # batched_nms is substituted: on large inputs it loops over the classes in Python.
    return [*builtin, Substitution(tv_ops.batched_nms, _batched_nms)]  # type: ignore[attr-defined]
