"""A model's state across lower(): its buffers' values kept, a forward that carries state from one
call to the next refused, and modules left in training mode named.

An artifact keeps no state between calls. A forward may still write a buffer: as a cache of a value
that depends on the input's shape only (written, then read, the same each call), or as state (a call
counter, a running mean in eval mode). Capture runs the model on the example; where that run wrote a
buffer, it runs it again and compares: outputs that change from one call to the next are refused,
naming the buffers. Whatever lower() runs, the model's buffers hold the user's values afterwards
(``kept_values``), so calling the model after lower() gives what it gave before.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fxdeploy.errors import CaptureError, TrainingModeWarning, user_stacklevel

_NAMED = 3  # modules named in the training-mode warning


@dataclass(frozen=True)
class _Saved:
    module: torch.nn.Module
    key: str
    name: str
    """Qualified, as ``named_buffers`` gives it."""
    buffer: torch.Tensor
    value: torch.Tensor

    def current(self) -> torch.Tensor | None:
        return self.module._buffers.get(self.key)


def _buffers(model: torch.nn.Module) -> list[_Saved]:
    """Every buffer, with the module holding it and a copy of its values: a forward may write into
    it (``self.count += 1``) or put another tensor in its place (``self.count = self.count + 1``)."""
    return [
        _Saved(module, key, f"{prefix}.{key}" if prefix else key, buffer, buffer.detach().clone())
        for prefix, module in model.named_modules(remove_duplicate=False)
        for key, buffer in module._buffers.items() if buffer is not None
    ]


def _same(a: torch.Tensor | None, b: torch.Tensor) -> bool:
    """Bit for bit (a NaN equals itself; -0.0 differs from 0.0)."""
    if a is None or a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.is_floating_point or a.dtype.is_complex:
        a, b = (t.detach().reshape(-1).contiguous().view(torch.uint8) for t in (a, b))
    return bool(torch.equal(a, b))


@contextlib.contextmanager
def kept_values(model: torch.nn.Module) -> Iterator[None]:
    """Give every buffer back its tensor and that tensor its values, however the block ends."""
    saved = _buffers(model)
    try:
        yield
    finally:
        with torch.no_grad():
            for entry in saved:
                entry.module._buffers[entry.key] = entry.buffer
                if entry.buffer.shape != entry.value.shape:
                    entry.buffer.set_(entry.value)
                elif not _same(entry.buffer, entry.value):
                    entry.buffer.copy_(entry.value)


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """Deployment means inference: capture in eval mode, and give the model back as it was."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


def run_once(model: torch.nn.Module, run: Callable[[], Any]) -> Any:
    """``run()``'s outputs; where it wrote any buffer, run again from the state it left, and refuse
    a model whose outputs differ between the two calls."""
    saved = _buffers(model)
    first = run()
    names = list(dict.fromkeys(entry.name for entry in saved if not _same(entry.current(), entry.value)))
    if not names:
        return first
    change = _change(first, run())
    if change is not None:
        raise CaptureError(
            f"{type(model).__name__}'s forward writes its buffer(s) {', '.join(names)}, and a second call on the "
            f"example returns other values than the first ({change}): the model carries state from one call to "
            "the next, and an artifact keeps none. Keep that state outside the model: pass it in as an input "
            "and return its new value as an output"
        )
    return first


def _change(first: Any, second: Any) -> str | None:
    """How the second call's outputs differ from the first's, or None where they are the same."""
    a, spec_a = pytree.tree_flatten(first)
    b, spec_b = pytree.tree_flatten(second)
    if spec_a != spec_b:
        return "another output structure"
    for index, (x, y) in enumerate(zip(a, b, strict=True)):
        if not isinstance(x, torch.Tensor):
            if x != y:
                return f"output #{index}: {x!r}, then {y!r}"
        elif x.shape != y.shape:
            return f"output #{index}: shape {list(x.shape)}, then {list(y.shape)}"
        elif not _same(x, y):
            gap = (x.double() - y.double()).abs().nan_to_num(float("inf")).max().item() if x.numel() else 0.0
            return f"output #{index} differs by {gap:.3g}"
    return None


def warn_training(model: torch.nn.Module) -> None:
    """Name the modules left in training mode whose forward reads it (BatchNorm, dropout, a head
    that returns raw outputs in training): lower() captures and checks in eval mode, so the
    artifact computes as ``model.eval()`` does, not as the model runs now."""
    training = [name or type(model).__name__ for name, module in model.named_modules()
                if module.training and _reads_training(module)]
    if not training:
        return
    shown = ", ".join(repr(name) for name in training[:_NAMED]) + (
        f" and {len(training) - _NAMED} more" if len(training) > _NAMED else ""
    )
    warnings.warn(
        f"{len(training)} module(s) of {type(model).__name__} are in training mode ({shown}): lower() captures "
        "and checks the model in eval mode, so the artifact computes as model.eval() does (BatchNorm's running "
        "statistics, no dropout). Call model.eval() before lower() to compare it with the model as it runs",
        TrainingModeWarning, stacklevel=user_stacklevel(),
    )


def _reads_training(module: torch.nn.Module) -> bool:
    code = getattr(type(module).forward, "__code__", None)
    return code is not None and "training" in code.co_names
