"""What a target is: the ``Target`` dataclass, what its lowering gets (``LoweringJob``) and returns
(``Lowered``), and a row of ``fxdeploy.targets()`` (``TargetStatus``). Target modules import these
from here; the registry (``fxdeploy.targets``) imports the target modules."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fxdeploy.artifact.manifest import Manifest
from fxdeploy.errors import TargetUnavailableError
from fxdeploy.passes.base import Pass
from fxdeploy.runtime.executor import Executor
from fxdeploy.settings import Settings


@dataclass
class LoweringJob:
    """Everything a target's lowering gets: the passed graph and how its inputs and outputs look."""

    graph_module: torch.fx.GraphModule
    example_inputs: list[torch.Tensor]
    input_names: list[str]
    output_names: list[str]
    dynamic_shapes: list[dict[int, Any] | None]
    settings: Settings
    out_dir: Path
    # the ExportedProgram that graph_module is taken from, where there is one (capture's when no pass
    # changed the graph, vectorize's for a batched engine): exported as is, not traced again
    exported_program: torch.export.ExportedProgram | None = None
    # Settings.precision "int8": the calibration and its samples (fxdeploy.quantize.Calibrated);
    # a target that lists int8 in its precisions quantizes from them in its lowering
    calibration: Any = None


@dataclass
class Lowered:
    files: list[str]
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Target:
    name: str
    pipeline: Sequence[Pass]
    lower: Callable[[LoweringJob], Lowered]
    load: Callable[[Path, Manifest, Settings], Executor]
    version: Callable[[], str | None]
    install_hint: str
    unavailable_reason: Callable[[], str | None] | None = None
    precisions: tuple[str, ...] = ("fp32", "fp16")
    """the ``Settings.precision`` values this target runs as asked; any other is refused, never ignored.
    A target with "int8" quantizes in its lowering, from ``LoweringJob.calibration``."""
    unsupported: Mapping[str, str] = field(default_factory=dict)
    """why a precision is not in ``precisions``, and what to use instead: said when it is refused."""
    batched_engine: bool = True
    """the engine takes a batch: a per-image graph is vectorized for it (``Settings.batching``).
    False where the engine runs one image at a time (ncnn's extractor)."""
    sections: Mapping[str, type] = field(default_factory=dict)
    """settings sections this target reads, by name: frozen ``fxdeploy.settings.Section`` dataclasses.
    Each becomes ``settings.<name>``, a ``[name]`` TOML table and ``--name-field`` CLI flags; the
    manifest and the cache key hold the target's own sections. Targets may share a section (same class)."""

    def reason(self) -> str | None:
        """None when the target can run here; otherwise why not, and what to install."""
        if self.unavailable_reason is not None:
            return self.unavailable_reason()
        if self.version() is None:
            return f"not installed: {self.install_hint}"
        return None

    def require(self) -> None:
        reason = self.reason()
        if reason is not None:
            raise TargetUnavailableError(f"target {self.name!r} is unavailable here: {reason}")


@dataclass(frozen=True)
class TargetStatus:
    name: str
    available: bool
    version: str | None
    reason: str | None
    source: str = "fxdeploy"
    """Where the target comes from: fxdeploy, or a plugin's entry point and distribution."""

    def __bool__(self) -> bool:
        return self.available
