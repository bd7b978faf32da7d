"""Stop a whole-batch capture as soon as the model's code fixes the batch.

A model that loops over the batch in Python (``for image in images``, ``range(x.shape[0])``) fixes
the batch dim when the loop starts, but torch.export says so ("Constraints violated") only after it
has traced the whole model: for torchvision's SSD300, a minute of tracing whose result capture
throws away before it captures one image. While a whole batch is exported non-strict, this torch
function mode reads the trace's shape environment before each torch call; once an input's size has
become a constant, it stops the trace with ``BatchFixed``, which says what torch.export would have
said, and where. Capture uses it only where the batch is dim 0 of every input and no other dim
(``per_image.batch_dim``): there, a dim-0 input size that became a constant is the batch; the
inputs' other dynamic dims (height, width) are left to torch.export's own error. It reads the
trace and changes nothing in it; a trace whose batch stays dynamic is the same with it or without.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from torch._guards import detect_fake_mode
from torch.overrides import TorchFunctionMode

from fxdeploy.capture.stacks import user_stack


class BatchFixed(RuntimeError):
    """The model's code fixed the dynamic batch: torch.export's refusal, said before its trace ends."""

    def __init__(self, name: str, size: int, where: str) -> None:
        super().__init__(
            f"Constraints violated ({name})! You marked {name} as dynamic but your code specialized it to be "
            f"a constant ({size}), before the call at {where}"
        )


class _WatchBatch(TorchFunctionMode):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.name, self.seen, self.fired = name, 0, False
        self.env: Any = None  # the trace's shape environment, once a call shows it

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        if not self.fired:
            self._check(args)
        return func(*args, **(kwargs or {}))

    def _check(self, args: tuple[Any, ...]) -> None:
        if self.env is None:  # one export traces in one fake mode: found once, not at every call
            self.env = getattr(detect_fake_mode(args), "shape_env", None)
        env = self.env
        if env is None or len(env.replacements) == self.seen:
            return
        self.seen = len(env.replacements)
        for symbol, value in env.replacements.items():
            if value.is_number and _is_batch(env.var_to_sources.get(symbol, ())):  # now a constant
                self.fired = True  # once: torch's own clean-up runs torch calls under this mode too
                stack = user_stack(sys._getframe(2))
                where = stack[-1].strip().splitlines()[0] if stack else "an unknown line"
                raise BatchFixed(self.name, int(value), where)


def _is_batch(sources: Any) -> bool:
    """True when the symbol is some input's dim 0 (``L['x'].size()[0]``)."""
    return any(getattr(source, "idx", None) == 0 and "size" in str(getattr(source, "prop", "")).lower()
               for source in sources)


@contextlib.contextmanager
def stopping_when_fixed(name: str | None) -> Iterator[None]:
    """Within: a non-strict export of the whole batch stops when its batch dim ``name`` is fixed;
    ``name`` None: nothing is watched."""
    if name is None:
        yield
        return
    with _WatchBatch(name):
        yield
