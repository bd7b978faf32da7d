"""The known torch.jit warnings, silenced where fxdeploy scripts, traces or loads TorchScript.

torch 2.13 deprecates torch.jit and warns on every script, trace and load, but TorchScript stays a
target (and ncnn's host tail is TorchScript). Lowering and the runtime layer both use this, so it
sits in neither.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

_DEPRECATED = r"`torch\.jit\.\w+` is deprecated"
_GRAPH_MODULE_ANNOTATIONS = r"The TorchScript type system doesn't support instance-level annotations"
"""Scripting any fx.GraphModule warns so: its own ``__init__`` annotates empty hook lists and ``meta``."""


@contextlib.contextmanager
def quiet_jit() -> Iterator[None]:
    """Only those two warnings are silenced; every other warning still shows."""
    with warnings.catch_warnings():
        # torch 2.13 warns with DeprecationWarning, 2.14 with FutureWarning
        warnings.filterwarnings("ignore", message=_DEPRECATED, category=Warning)
        warnings.filterwarnings("ignore", message=_GRAPH_MODULE_ANNOTATIONS, category=UserWarning)
        yield
