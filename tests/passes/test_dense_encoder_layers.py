"""dense_encoder_layers: PyTorch's fused encoder layer (dynamo's capture of an eval-mode
``nn.TransformerEncoderLayer``) spelt with public ops, equal to the layer run eagerly."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fxdeploy.passes import op_histogram
from fxdeploy.passes.dense_encoder_layers import check, dense_encoder_layers
from tests.passes.graphs import applied

FUSED = "aten._transformer_encoder_layer_fwd.default"


class Layer(nn.Module):
    """One encoder layer and the masks a user gives it."""

    def __init__(self, norm_first: bool, activation: str, masks: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, norm_first=norm_first,
                                                activation=activation)
        self.masks = masks

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        causal = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        if self.masks == "padding":
            return self.layer(x, src_key_padding_mask=padding)
        if self.masks == "square":
            return self.layer(x, src_mask=causal)
        if self.masks == "both":
            return self.layer(x, src_mask=causal, src_key_padding_mask=padding)
        return self.layer(x)


def _inputs(batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 9, (batch, 1), generator=generator)
    return torch.randn(batch, 8, 16, generator=generator), torch.arange(8) >= lengths


def _strict_graph(model: nn.Module) -> torch.fx.GraphModule:
    batch = torch.export.Dim("batch", min=1, max=8)
    with torch.no_grad():
        exported = torch.export.export(model.eval(), _inputs(2, 0), strict=True,
                                       dynamic_shapes={"x": {0: batch}, "padding": {0: batch}})
    return exported.module(check_guards=False)


@pytest.mark.parametrize("masks", ["none", "padding", "square", "both"])
@pytest.mark.parametrize(("norm_first", "activation"), [(False, "relu"), (True, "gelu")])
def test_the_fused_layer_becomes_public_ops_that_compute_it(norm_first: bool, activation: str, masks: str) -> None:
    model = Layer(norm_first, activation, masks).eval()
    gm = _strict_graph(model)
    assert op_histogram(gm).get(FUSED) == 1, "dynamo no longer captures the fused layer: nothing to check here"
    gm = applied(dense_encoder_layers, gm)
    assert FUSED not in op_histogram(gm)
    for batch, seed in [(2, 1), (5, 2), (1, 3)]:
        x, padding = _inputs(batch, seed)
        with torch.no_grad():
            torch.testing.assert_close(gm(x, padding), model(x, padding), atol=1e-5, rtol=1e-5)


def test_other_ops_are_left_alone_saying_why() -> None:
    gm = torch.export.export(nn.Linear(4, 4), (torch.randn(2, 4),)).module(check_guards=False)
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    assert check(node) == "not aten._transformer_encoder_layer_fwd"
