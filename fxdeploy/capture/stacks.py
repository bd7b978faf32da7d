"""Every node of a non-strict capture carries the user's stack down to the op's own line.

torch.export's non-strict tracer keeps only the frames named ``forward`` in a node's
``stack_trace`` (``_record_forward_stack_traces_only``): an op in a helper that forward calls
(YOLOv5's ``non_max_suppression``, a library's ``postprocess`` function) is attributed to the line
of forward that calls the helper, and a refusal would name that line. While fxdeploy exports
non-strict, a torch function mode gives each torch call the stack from the model's forward down to
the call, outside torch, as the stack trace of the nodes the call makes
(``torch.fx.traceback.set_stack_trace``, which torch's tracer reads while node meta is preserved).
Strict capture (dynamo) records whole stacks itself.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import traceback
from collections.abc import Iterator
from types import FrameType
from typing import Any

import torch
import torch.fx.traceback as fx_traceback
from torch.overrides import TorchFunctionMode

_TORCH = os.path.dirname(torch.__file__) + os.sep
_MOST = 12  # frames kept where no forward is on the stack (a function exported as is)


class _StackPerCall(TorchFunctionMode):
    """Sets the user's stack as the stack trace of what each torch call traces."""

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        fx_traceback.set_stack_trace(user_stack(sys._getframe(1)))
        return func(*args, **(kwargs or {}))


def user_stack(frame: FrameType | None) -> list[str]:
    """The frames outside torch, outermost first, from the outermost ``forward`` down to ``frame``,
    formatted as ``traceback.format_list`` does (``File "...", line N, in name``)."""
    frames: list[tuple[str, int, str]] = []
    outermost_forward = -1
    while frame is not None:
        code = frame.f_code
        if not code.co_filename.startswith((_TORCH, "<")):
            frames.append((code.co_filename, frame.f_lineno, code.co_name))
            if code.co_name == "forward":
                outermost_forward = len(frames)
        frame = frame.f_back
    kept = frames[:outermost_forward] if outermost_forward > 0 else frames[:_MOST]
    return list(_formatted(tuple(kept[::-1])))


@functools.lru_cache(maxsize=8192)
def _formatted(frames: tuple[tuple[str, int, str], ...]) -> tuple[str, ...]:
    """Formatting reads each frame's source line: a capture calls torch from the same few lines
    thousands of times (a loop over levels, images, anchors), so each stack is formatted once."""
    return tuple(traceback.format_list([traceback.FrameSummary(*frame) for frame in frames]))


@contextlib.contextmanager
def recording_stacks() -> Iterator[None]:
    """Within: what torch.export traces non-strict carries each torch call's whole user stack."""
    with fx_traceback.preserve_node_meta(), _StackPerCall():
        yield
