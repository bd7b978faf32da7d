from __future__ import annotations

import pytest
import torch

from fxdeploy.errors import PassError
from fxdeploy.passes import PassResult, run_pipeline
from fxdeploy.passes.remove_dropout import remove_dropout
from fxdeploy.settings import Settings
from tests.passes.graphs import aten, build


def broken_pass(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    raise ValueError("boom")


def test_failure_names_the_pass_and_what_ran_before() -> None:
    gm = build(lambda g, xs: g.call_function(aten.relu.default, (xs[0],)), 1, [torch.randn(2)])
    message = r"pass 'broken_pass' failed \(ValueError: boom\); passes run before it: remove_dropout"
    with pytest.raises(PassError, match=message):
        run_pipeline(gm, (remove_dropout, broken_pass), Settings())


def test_report_records_histograms_and_honest_modified_flags() -> None:
    def body(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> torch.fx.Node:
        return g.call_function(aten.dropout.default, (xs[0], 0.1, False))

    gm = build(body, 1, [torch.randn(2)])
    _, report = run_pipeline(gm, (remove_dropout, remove_dropout), Settings())
    assert [(r.name, r.modified) for r in report.records] == [("remove_dropout", True), ("remove_dropout", False)]
    assert report.records[0].before == {"aten.dropout.default": 1} and report.records[0].after == {}
