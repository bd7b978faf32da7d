"""fxdeploy.capture.vmap_views: the views vmap wraps around each op of a vectorized graph go where
they change nothing, and only there. Each graph is compared with itself before the rewrite."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from fxdeploy.capture import capture
from fxdeploy.capture.vectorize import vectorize
from fxdeploy.capture.vmap_views import VIEWS, simplify, sink_check

aten = torch.ops.aten


class Block(nn.Module):
    """YOLO's pieces: conv, batch norm, SiLU, a split into halves, a residual add, a cat of the
    halves and pooled copies, upsampling, a conv on the cat."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.SiLU())
        self.inner = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.SiLU())
        self.pool = nn.MaxPool2d(5, 1, 2)
        self.head = nn.Sequential(nn.Conv2d(16, 6, 1), nn.BatchNorm2d(6), nn.SiLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.stem(x).chunk(2, 1)
        b = b + self.inner(b)
        y = torch.cat([a, b, self.pool(b), self.pool(self.pool(b))], 1)
        return nn.functional.interpolate(self.head(y), scale_factor=2.0).flatten(2)


def _batch_norm_statistics(model: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
    return model.eval()


def _views_between_convolutions(gm: torch.fx.GraphModule) -> list[str]:
    """Views whose input comes from a convolution's output through pointwise ops, cat or split."""
    found = []
    for node in gm.graph.nodes:
        if node.target in VIEWS and any(user.target is aten.conv2d.default for user in node.users):
            found.append(f"{node.name}: {node.target}")
    return found


def test_a_vectorized_backbone_has_no_view_before_any_convolution() -> None:
    model = _batch_norm_statistics(Block())
    gm = capture(model, (torch.randn(1, 3, 12, 12),)).graph_module
    batched, program = vectorize(gm, [torch.randn(2, 3, 12, 12)], [{0: torch.export.Dim("batch", min=1, max=8)}])
    assert _views_between_convolutions(program.graph_module) == []
    for size in (1, 5):
        x = torch.randn(size, 3, 12, 12)
        want = torch.cat([model(x[i : i + 1]) for i in range(size)])
        torch.testing.assert_close(batched(x)[0], want.unsqueeze(1), rtol=1e-5, atol=1e-5)


def _exported(fn: Callable[..., torch.Tensor], *shapes: tuple[int, ...]) -> torch.fx.GraphModule:
    class Fn(nn.Module):
        def forward(self, *xs: torch.Tensor) -> torch.Tensor:
            return fn(*xs)

    inputs = tuple(torch.randn(s) for s in shapes)
    return torch.export.export(Fn(), inputs).run_decompositions({}).graph_module


CASES: dict[str, tuple[Callable[..., torch.Tensor], tuple[tuple[int, ...], ...], int]] = {
    # (graph, input shapes, how many ops of VIEWS remain at most)
    "pointwise on two views of one shape, then viewed back": (
        lambda a, b: (torch.sigmoid(a.unsqueeze(1)) * b.unsqueeze(1) + 2).view(4, 6) * 3, ((4, 6), (4, 6)), 0),
    "a 0-d operand": (lambda a, s: (a.unsqueeze(0) * s).squeeze(0) - 1, ((3, 5), ()), 0),
    "cat and split of unsqueezed tensors": (
        lambda a, b: [p.squeeze(1).exp() for p in torch.cat([a.unsqueeze(1), b.unsqueeze(1)], 2).split([2, 5], 2)][1],
        ((3, 4), (3, 3)), 0),
    "a view that reorders nothing after a transpose": (lambda a: a.t().unsqueeze(0).view(5, 3) + 1, ((3, 5),), 0),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_rewrite_keeps_the_values(case: str) -> None:
    fn, shapes, views_left = CASES[case]
    gm = _exported(fn, *shapes)
    inputs = [torch.randn(s) for s in shapes]
    want = fn(*inputs)
    assert simplify(gm) > 0
    assert sum(n.target in VIEWS for n in gm.graph.nodes) <= views_left, gm.graph
    torch.testing.assert_close(gm(*inputs)[0], want)


REFUSED: dict[str, tuple[Callable[..., torch.Tensor], tuple[tuple[int, ...], ...]]] = {
    # the operands are views of other shapes: moving the op first would broadcast differently
    "broadcast between views of other shapes": (lambda a, b: (a.unsqueeze(1) + b.view(1, 4, 1)) * 2, ((2, 3), (4,))),
    # views to one shape from sources of other shapes map elements differently
    "views to one shape from other shapes": (lambda a, b: (a.view(3, 4) + b.view(3, 4)) * 2, ((2, 6), (4, 3))),
    # an operand that is not a view: the op cannot run before the view of the other one
    "a full-size operand that is no view": (lambda a, b: (a.unsqueeze(0) * b).exp(), ((3, 4), (1, 3, 4))),
    # cat along the dim the unsqueeze added is a stack: no cat of the sources gives it
    "cat along the unsqueezed dim": (lambda a, b: torch.cat([a.unsqueeze(0), b.unsqueeze(0)], 0) * 2, ((3,), (3,))),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_rewrite_that_would_change_values_is_not_made(case: str) -> None:
    fn, shapes = REFUSED[case]
    gm = _exported(fn, *shapes)
    inputs = [torch.randn(s) for s in shapes]
    want = fn(*inputs)
    before = [str(n.target) for n in gm.graph.nodes]
    assert simplify(gm) == 0
    assert [str(n.target) for n in gm.graph.nodes] == before
    torch.testing.assert_close(gm(*inputs)[0], want)


def test_sink_check_names_no_view_for_a_returned_op() -> None:
    gm = _exported(lambda a: a.unsqueeze(0).exp(), (3,))
    exp = next(n for n in gm.graph.nodes if n.target is aten.exp.default)
    assert sink_check(exp) is None  # the exported program's signature names the node it returns
