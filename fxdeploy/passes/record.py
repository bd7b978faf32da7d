"""What the passes learn about a graph that its nodes do not say, for ``lower()`` to write down.

One typed record per GraphModule, under one ``gm.meta`` key. It is frozen: a pass that changes it
puts a new one in place (``update``), so a graph copied before a pass keeps its own record.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

KEY = "fxdeploy"


@dataclasses.dataclass(frozen=True)
class Trim:
    """A padded output the host slices: along ``dim``, to the value of the hidden output ``count``."""

    dim: int
    count: str

    def to_dict(self) -> dict[str, Any]:
        return {"dim": self.dim, "count": self.count}


@dataclasses.dataclass(frozen=True)
class GraphRecord:
    output_names: tuple[str, ...] | None = None
    """The graph outputs' names, in order (capture's names, then any a pass adds)."""
    hidden: tuple[str, ...] = ()
    """Outputs a pass added for the host's use (NMS counts); not part of the model's structure."""
    trim: dict[str, Trim] = dataclasses.field(default_factory=dict)
    """Padded outputs by name, and how the host trims each."""
    output_leaves: tuple[dict[str, Any], ...] | None = None
    """Each output described for the manifest (``tensorize_outputs``, the last pass, writes it)."""
    precision: dict[str, Any] | None = None
    """What ran in which precision (``precision_policy``), for the manifest."""

    def names_for(self, count: int) -> list[str]:
        """The output names, or ``output_<i>`` for a graph that was never named."""
        return list(self.output_names) if self.output_names else [f"output_{i}" for i in range(count)]


def record(gm: torch.fx.GraphModule) -> GraphRecord:
    """``gm``'s record; an empty one if no pass or capture has written it yet."""
    found = gm.meta.get(KEY)
    return found if isinstance(found, GraphRecord) else GraphRecord()


def update(gm: torch.fx.GraphModule, **changes: Any) -> GraphRecord:
    """Put a copy of ``gm``'s record with ``changes`` in its place, and return it."""
    new = dataclasses.replace(record(gm), **changes)
    gm.meta[KEY] = new
    return new
