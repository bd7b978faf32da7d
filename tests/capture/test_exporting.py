"""exporting: a Python branch on a data-dependent size is decided by the example's real values."""

from __future__ import annotations

import torch

from fxdeploy.capture import capture


class BranchesOnAFilter(torch.nn.Module):
    """YOLOv5's ``if not x.shape[0]: continue`` after a filter of scores that weights compute, then
    an in-place write into the kept rows (the captured program is functionalized afterwards)."""

    def __init__(self) -> None:
        super().__init__()
        self.score = torch.nn.Linear(4, 1)
        with torch.no_grad():
            self.score.weight.fill_(1.0)
            self.score.bias.fill_(-1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = self.score(x).squeeze(1).sigmoid()
        kept = x[scores > 0.6]
        if not kept.shape[0]:
            return torch.zeros(0, 4)
        y = kept.clone()
        y[:, 0] = 0.0
        return y


def test_the_branch_is_decided_by_the_weights_real_values() -> None:
    """The weights decide which rows pass: torch 2.13's real-value propagation leaves an
    nn.Parameter's values uninitialized, which would decide the branch at random."""
    model = BranchesOnAFilter().eval()
    x = torch.rand(20, 4, generator=torch.Generator().manual_seed(0))
    x[:5] += 1.0  # these pass the filter; the rest may or may not
    captured = capture(model, (x,))
    output = next(n for n in captured.graph_module.graph.nodes if n.op == "output")
    (result,) = output.args[0]
    assert str(result.target) != "aten.zeros.default", "the example's rows passed the filter; the branch took none"
    assert isinstance(result.meta["val"].shape[0], torch.SymInt)  # the rows a filter kept
    with torch.no_grad():
        want = model(x)
    assert want.shape[0] >= 5
    torch.testing.assert_close(captured.graph_module(x)[0], want)
    assert isinstance(model.score.weight, torch.nn.Parameter)  # the model keeps its parameters
    assert {name for name, _ in model.named_parameters()} == {"score.weight", "score.bias"}
