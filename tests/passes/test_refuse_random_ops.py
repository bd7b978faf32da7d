"""refuse_random_ops: a model that draws random numbers is refused at the line that draws them,
where lowering it gave a runtime's error (ONNX Runtime: no RandomNormalLike(22)) or "output #0
differs from eager"."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import fxdeploy
from fxdeploy.errors import PassError


class Noisy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 0.01 * torch.randn_like(x)


class DropsInEval(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x, 0.5, training=True)


class DropsAsTrained(torch.nn.Module):
    """Dropout as models write it: the identity in eval mode, which lower() runs in."""

    def __init__(self) -> None:
        super().__init__()
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(x) * 2 + F.dropout(x, 0.3, training=self.training)


@pytest.mark.parametrize(("model", "op"), [(Noisy(), "aten.randn_like"), (DropsInEval(), "aten.dropout")],
                         ids=["randn_like", "dropout_training"])
@pytest.mark.parametrize("target", ["onnxruntime", "torchscript"])
def test_a_random_op_is_refused_naming_its_line(model: torch.nn.Module, op: str, target: str) -> None:
    with pytest.raises(PassError, match="refuse_random_ops") as caught:
        fxdeploy.lower(model, (torch.randn(2, 4),), target=target)
    message = str(caught.value)
    assert f'{__file__}", line' in message and "in forward" in message and op in message and "as an input" in message


def test_dropout_that_is_the_identity_in_eval_mode_lowers() -> None:
    model = DropsAsTrained()
    x = torch.randn(3, 4)
    deployed = fxdeploy.lower(model, (x,), target="onnxruntime")
    torch.testing.assert_close(deployed(x), x * 3)
    assert model.training  # lower() ran it in eval mode and gave its mode back


class Recurrent(torch.nn.Module):
    """torch tags an LSTM and a GRU as random (their dropout between layers): off in eval mode."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(4, 6, 2, batch_first=True, dropout=0.3)
        self.gru = torch.nn.GRU(6, 5, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gru(self.lstm(x)[0])[0]


def test_ops_random_only_through_their_dropout_lower_in_eval_mode() -> None:
    from fxdeploy.capture import capture
    from fxdeploy.passes.refuse_random_ops import check

    model, x = Recurrent().eval(), torch.randn(2, 7, 4)
    graph = capture(model, (x,)).graph_module.graph
    nodes = [n for n in graph.nodes if n.op == "call_function" and "lstm" in str(n.target)]
    assert nodes and check(nodes[0]).startswith("random only through a dropout, here off (dropout=0.3, train=False")
    deployed = fxdeploy.lower(model, (x,), target="onnxruntime")
    with torch.no_grad():
        torch.testing.assert_close(deployed(x), model(x), atol=1e-5, rtol=1e-4)
