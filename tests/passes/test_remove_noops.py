from __future__ import annotations

import torch

from fxdeploy.passes import op_histogram
from fxdeploy.passes.remove_noops import remove_noops
from fxdeploy.settings import Settings
from tests.passes.graphs import aten, build


def test_copies_and_aliases_are_removed_but_input_copies_and_casts_stay() -> None:
    def body(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> tuple[torch.fx.Node, ...]:
        kept_copy = g.call_function(aten.clone.default, (xs[0],))  # copy of an input: stays
        relu = g.call_function(aten.relu.default, (xs[0],))
        detached = g.call_function(aten.detach.default, (relu,))
        cloned = g.call_function(aten.clone.default, (detached,))
        same = g.call_function(aten._to_copy.default, (cloned,), {"dtype": torch.float32})
        cast = g.call_function(aten._to_copy.default, (same,), {"dtype": torch.float16})
        return kept_copy, same, cast

    gm = build(body, 1, [torch.randn(5)])
    before = op_histogram(gm)
    result = remove_noops(gm, Settings())
    gm = result.graph_module
    gm.graph.lint()
    gm.recompile()
    after = op_histogram(gm)
    assert result.modified
    assert before["aten.clone.default"] == 2 and after["aten.clone.default"] == 1
    assert "aten.detach.default" not in after
    assert after["aten._to_copy.default"] == 1  # the real fp16 cast
    x = torch.randn(5)
    copy, same, cast = gm(x)
    assert torch.equal(copy, x) and torch.equal(same, x.relu()) and cast.dtype == torch.float16
