"""Pass infrastructure: a pass is ``(gm, settings) -> PassResult``; pipelines are ordered tuples."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from fxdeploy.errors import PassError
from fxdeploy.passes.graph_utils import stamp_inserted
from fxdeploy.settings import Settings


@dataclass(frozen=True)
class PassResult:
    graph_module: torch.fx.GraphModule
    modified: bool


Pass = Callable[[torch.fx.GraphModule, Settings], PassResult]


@dataclass(frozen=True)
class PassRecord:
    name: str
    modified: bool
    before: dict[str, int]
    after: dict[str, int]


@dataclass
class PipelineReport:
    records: list[PassRecord] = field(default_factory=list)

    @property
    def fired(self) -> list[str]:
        return [r.name for r in self.records if r.modified]


def op_histogram(gm: torch.fx.GraphModule) -> dict[str, int]:
    """Counts of call_function targets, e.g. {'aten.convolution.default': 53}."""
    counts: Counter[str] = Counter()
    for node in gm.graph.nodes:
        if node.op == "call_function":
            counts[_target_name(node.target)] += 1
        elif node.op == "call_module":
            counts[f"module:{node.target}"] += 1
    return dict(counts)


def _target_name(target: object) -> str:
    name = getattr(target, "__name__", None)
    if isinstance(target, torch._ops.OpOverload):
        return str(target).removeprefix("torch.ops.")
    return f"{getattr(target, '__module__', '')}.{name}".lstrip(".") if name else str(target)


def run_pipeline(
    gm: torch.fx.GraphModule, passes: Sequence[Pass], settings: Settings
) -> tuple[torch.fx.GraphModule, PipelineReport]:
    """Run passes in order; a failure names the pass and every pass that ran before it."""
    report = PipelineReport()
    for p in passes:
        name = getattr(p, "__name__", repr(p))
        before = op_histogram(gm)
        known = set(gm.graph.nodes)
        try:
            result = p(gm, settings)
            gm = result.graph_module
            if result.modified:
                stamp_inserted(gm, known)  # an error naming an inserted node names the user's line
                gm.graph.lint()
                gm.recompile()
        except Exception as exc:
            ran = [r.name for r in report.records] or ["nothing"]
            raise PassError(
                f"pass {name!r} failed ({type(exc).__name__}: {exc}); passes run before it: "
                f"{', '.join(ran)}"
            ) from exc
        report.records.append(PassRecord(name, result.modified, before, op_histogram(gm)))
    return gm, report
