"""Tiny graphs for the padding rules: capture a module, run the pass, run the result as the host
does (trimming each padded output by its hidden count) and compare with eager."""

from __future__ import annotations

from collections.abc import Callable

import torch

from fxdeploy.capture import capture
from fxdeploy.passes import op_histogram, run_pipeline
from fxdeploy.passes.padding import pad_compactions
from fxdeploy.passes.pipelines import CLEANUP
from fxdeploy.passes.record import record, update
from fxdeploy.settings import Settings


def captured(model: torch.nn.Module, *args: torch.Tensor) -> torch.fx.GraphModule:
    result = capture(model, args)
    gm = result.graph_module
    update(gm, output_names=tuple(result.output_names))
    gm, _ = run_pipeline(gm, CLEANUP, Settings())
    return gm


def padded(model: torch.nn.Module, *args: torch.Tensor) -> tuple[torch.fx.GraphModule, dict[str, int], dict[str, int]]:
    """The padded graph, its op histogram before and after; the graph is valid and fully static."""
    gm = captured(model, *args)
    before = op_histogram(gm)
    result = pad_compactions(gm, Settings())
    assert result.modified
    gm = result.graph_module
    gm.graph.lint()
    gm.recompile()
    for node in gm.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor):
            assert all(isinstance(size, int) for size in value.shape), f"{node.name} keeps a dynamic size {value.shape}"
    return gm, before, op_histogram(gm)


def trimmed(gm: torch.fx.GraphModule, *args: torch.Tensor) -> list[torch.Tensor]:
    """The user-visible outputs, each padded one cut at its count, as the host does."""
    names = list(record(gm).output_names)
    outputs = dict(zip(names, gm(*args), strict=True))
    trim = {name: t.to_dict() for name, t in record(gm).trim.items()}
    visible = [n for n in names if n not in record(gm).hidden]
    return [
        outputs[n].narrow(trim[n]["dim"], 0, int(outputs[trim[n]["count"]])) if n in trim else outputs[n]
        for n in visible
    ]


def assert_matches_eager(
    model: torch.nn.Module, gm: torch.fx.GraphModule, make: Callable[[int], tuple[torch.Tensor, ...]], seeds: int = 5
) -> list[int]:
    """Padded graph == eager on fresh inputs (another number of selected rows each time); returns
    the eager row counts of the first output, so a test can show they varied."""
    counts = []
    for seed in range(1, seeds + 1):
        args = make(seed)
        want = model(*[a.clone() for a in args])
        want = list(want) if isinstance(want, (tuple, list)) else [want]
        got = trimmed(gm, *[a.clone() for a in args])
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w)
        counts.append(int(want[0].shape[0]) if want[0].dim() else 1)
    return counts


def rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))
