"""float_attention_mask: a boolean SDPA mask becomes the equivalent additive float mask."""

from __future__ import annotations

import torch

from fxdeploy.passes import op_histogram
from fxdeploy.passes.ncnn.float_attention_mask import float_attention_mask
from fxdeploy.settings import Settings
from tests.passes.graphs import aten, build

SDPA = aten.scaled_dot_product_attention.default
SDPA_NAME = "aten.scaled_dot_product_attention.default"


def _sdpa_graph(mask: torch.Tensor) -> torch.fx.GraphModule:
    q = torch.randn(2, 4, 5, 8)
    return build(lambda g, xs: (g.call_function(SDPA, (xs[0], xs[0], xs[0], xs[1])),), 2, [q, mask])


def test_bool_mask_becomes_additive_and_results_stay_equal() -> None:
    mask = torch.rand(2, 1, 5, 5) > 0.3
    mask[..., 0] = True  # every query sees at least one key
    gm = _sdpa_graph(mask)
    q = torch.randn(2, 4, 5, 8)
    want = gm(q, mask)[0]
    result = float_attention_mask(gm, Settings())
    result.graph_module.graph.lint()
    result.graph_module.recompile()
    assert result.modified
    assert op_histogram(result.graph_module) == {"aten.where.Scalar": 1, SDPA_NAME: 1}
    torch.testing.assert_close(result.graph_module(q, mask)[0], want, rtol=0, atol=1e-6)


def test_float_mask_is_left_alone() -> None:
    result = float_attention_mask(_sdpa_graph(torch.zeros(2, 1, 5, 5)), Settings())
    assert not result.modified
    assert op_histogram(result.graph_module) == {SDPA_NAME: 1}
