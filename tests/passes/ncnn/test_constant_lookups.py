"""constant_lookups: an embedding lookup of constant ids is done once at lowering time (sliced as
its ids were, or one row where every id is the same), at a dynamic length too; lookups of ids the
graph does not prove constant stay."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fxdeploy.capture import capture
from fxdeploy.passes import op_histogram
from fxdeploy.passes.ncnn.constant_lookups import constant_lookups
from fxdeploy.settings import Settings


class Lookups(nn.Module):
    """BERT's embeddings of ids the model makes itself: ``ids`` picks which."""

    def __init__(self, ids: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.ids, self.table = ids, nn.Embedding(10, 4)
        self.register_buffer("positions", torch.arange(10).view(1, 10))  # BERT's position_ids
        self.register_buffer("types", torch.zeros(1, 10, dtype=torch.int64))  # BERT's token_type_ids
        self.register_buffer("mixed", torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6, 5, 3]]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length = x.shape[0], x.shape[1]
        if self.ids == "types":
            return x + self.table(self.types[:, :length].expand(batch, length))
        if self.ids == "types-summed":
            return x + self.table(self.types[:, :length].expand(batch, length)).sum(1, keepdim=True)
        if self.ids == "from-input":
            return x + self.table(x.argmax(-1))
        return x + self.table(getattr(self, self.ids)[:, :length])


def _run(ids: str) -> tuple[torch.fx.GraphModule, bool]:
    model = Lookups(ids).eval()
    shapes = {"x": {0: torch.export.Dim("batch", min=1, max=4), 1: torch.export.Dim("length", min=2, max=10)}}
    gm = capture(model, (torch.randn(2, 6, 4),), dynamic_shapes=shapes).graph_module
    result = constant_lookups(gm, Settings())
    result.graph_module.graph.lint()
    result.graph_module.recompile()
    for shape in ((2, 6, 4), (3, 9, 4), (1, 2, 4)):  # the same values at every length
        x = torch.randn(shape)
        with torch.no_grad():
            torch.testing.assert_close(result.graph_module(x)[0], model(x), rtol=0, atol=0)
    return result.graph_module, result.modified


@pytest.mark.parametrize("ids", ["positions", "mixed", "types"])
def test_a_lookup_of_constant_ids_is_done_once(ids: str) -> None:
    gm, modified = _run(ids)
    assert modified
    assert "aten.embedding.default" not in op_histogram(gm)
    placeholder = next(n for n in gm.graph.nodes if n.op == "placeholder")
    assert not str(placeholder.meta["val"].shape[1]).isdigit(), "the length stays dynamic"


@pytest.mark.parametrize("ids", ["from-input", "types-summed"])
def test_other_lookups_stay(ids: str) -> None:
    gm, modified = _run(ids)
    assert not modified
    assert "aten.embedding.default" in op_histogram(gm)
