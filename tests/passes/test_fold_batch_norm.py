"""fold_batch_norm: an inference BatchNorm after a convolution becomes the convolution's weights
and bias (TorchScript's pipeline); where folding would change a value, it does not fire."""

from __future__ import annotations

import torch
from torch import nn

import fxdeploy
from fxdeploy.passes import op_histogram
from fxdeploy.passes.fold_batch_norm import _written_in_place, check, fold_batch_norm
from fxdeploy.settings import Settings
from tests.helpers import require_target


def _norm(channels: int, dims: int = 2) -> nn.Module:
    """A BatchNorm with statistics and affine terms far from their initial values."""
    norm = (nn.BatchNorm1d if dims == 1 else nn.BatchNorm2d)(channels)
    g = torch.Generator().manual_seed(channels)
    with torch.no_grad():
        norm.running_mean.copy_(torch.rand(channels, generator=g) * 2 - 1)
        norm.running_var.copy_(torch.rand(channels, generator=g) * 3 + 0.1)
        norm.weight.copy_(torch.rand(channels, generator=g) + 0.5)
        norm.bias.copy_(torch.rand(channels, generator=g) - 0.5)
    return norm


class Mixed(nn.Module):
    """Folds: a bias-free conv, a biased grouped conv, a conv1d. Does not: a transposed conv, a conv
    whose raw output is also read (a residual), and an affine-free BatchNorm after a non-conv."""

    def __init__(self) -> None:
        super().__init__()
        self.plain = nn.Sequential(nn.Conv2d(3, 8, 3, bias=False), _norm(8), nn.SiLU())
        self.grouped = nn.Sequential(nn.Conv2d(8, 8, 3, groups=4), _norm(8))
        self.up = nn.Sequential(nn.ConvTranspose2d(8, 4, 2, stride=2), _norm(4))
        self.raw = nn.Conv2d(4, 4, 1)
        self.raw_norm = _norm(4)
        self.line = nn.Sequential(nn.Conv1d(4, 6, 3), _norm(6, dims=1))
        self.free = nn.BatchNorm1d(6, affine=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.up(self.grouped(self.plain(x)))
        raw = self.raw(y)
        y = self.raw_norm(raw) + raw
        line = self.line(y.mean(-1))
        return y, self.free(line.relu())


def _folded_graph(model: nn.Module, x: torch.Tensor) -> torch.fx.GraphModule:
    gm = torch.export.export(model, (x,)).module()
    result = fold_batch_norm(gm, Settings())
    assert result.modified
    gm = result.graph_module
    gm.graph.lint()
    gm.recompile()
    return gm


def test_only_the_foldable_norms_fold_and_values_stay() -> None:
    model, x = Mixed().eval(), torch.randn(2, 3, 12, 12)
    gm = _folded_graph(model, x)
    assert op_histogram(gm)["aten.batch_norm.default"] == 3  # transposed, raw output read, after a relu
    with torch.no_grad():
        pairs = list(zip(gm(x), model(x), strict=True))
    for got, want in pairs:
        assert float((got - want).abs().max()) < 1e-5


def test_the_artifact_runs_no_batch_norm_and_matches_eager(tmp_path) -> None:  # noqa: ANN001
    require_target("torchscript")
    model = nn.Sequential(nn.Conv2d(3, 8, 3), _norm(8), nn.SiLU(), nn.Conv2d(8, 4, 3, bias=False), _norm(4)).eval()
    before = {name: p.clone() for name, p in model.state_dict().items()}
    x = torch.randn(3, 3, 16, 16)
    deployed = fxdeploy.lower(model, (x,), target="torchscript", dynamic_shapes={"input": {0: ("batch", 1, 4)}})
    deployed.save(tmp_path / "art")
    loaded = fxdeploy.load(tmp_path / "art")
    scripted = torch.jit.load(str(next((tmp_path / "art").glob("*.pt"))))
    assert "batch_norm" not in scripted.code
    for batch in (1, 3):
        assert float((loaded(x[:batch]) - model(x[:batch]).detach()).abs().max()) < 1e-5
    assert all(torch.equal(before[name], p) for name, p in model.state_dict().items())  # the user's weights kept


def test_a_statistic_written_in_place_is_not_folded() -> None:
    """Exported, the write is functionalized (the norm reads the add's result, not a constant); in
    a graph that writes the attribute itself, the write is seen."""

    class Written(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.norm = nn.Conv2d(3, 4, 1), _norm(4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.norm.running_mean.add_(1.0)
            return self.norm(self.conv(x))

    gm = torch.export.export(Written().eval(), (torch.randn(1, 3, 4, 4),)).module()
    assert not fold_batch_norm(gm, Settings()).modified

    module = Written().eval()
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    weight, bias = graph.get_attr("conv.weight"), graph.get_attr("conv.bias")
    stats = [graph.get_attr(f"norm.{name}") for name in ("weight", "bias", "running_mean", "running_var")]
    graph.call_function(torch.ops.aten.add_.Tensor, (stats[2], 1.0))
    conv = graph.call_function(torch.ops.aten.conv2d.default, (x, weight, bias))
    norm = graph.call_function(torch.ops.aten.batch_norm.default, (conv, *stats, False, 0.1, 1e-5, False))
    graph.output(norm)
    gm = torch.fx.GraphModule(module, graph)
    assert _written_in_place(gm) == {"norm.running_mean"}
    assert check(gm, norm, _written_in_place(gm)) == "norm.running_mean is written in place by the graph"
    assert not fold_batch_norm(gm, Settings()).modified
