"""Build tiny aten graphs by hand for pass tests."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

aten = torch.ops.aten


def build(body: Callable[[torch.fx.Graph, list[torch.fx.Node]], object], n_inputs: int,
          example: list[torch.Tensor]) -> torch.fx.GraphModule:
    """Make a GraphModule from ``body(graph, placeholders) -> output value`` with meta['val'] set."""
    graph = torch.fx.Graph()
    inputs = [graph.placeholder(f"x{i}") for i in range(n_inputs)]
    graph.output(body(graph, inputs))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    FakeTensorProp(gm).propagate(*example)
    return gm


def applied(pass_: Callable[..., object], gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``pass_`` run on ``gm`` with default settings: it must report a change and leave a valid graph."""
    from fxdeploy.settings import Settings

    result = pass_(gm, Settings())
    assert result.modified, f"{pass_.__name__} changed nothing"
    result.graph_module.graph.lint()
    result.graph_module.recompile()
    return result.graph_module
