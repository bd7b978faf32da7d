"""size_operands: a tensor's arithmetic or comparison with a run-time size (``x / (h - 1)``,
``(w - 1) - x``, ``x % w``, ``x > h``, ``weight.sum() / (h - 1)``) takes the size as a filled tensor,
which the cut makes on the host. pnnx had left ``div(@0,sub(size(@0,2),1))`` as a ``pnnx.Expression``
that ncnn cannot run, and torch.jit.trace failed on the ``Scalar`` ops ("Expected a value of type
'number'"): lower() refused the graph."""

from __future__ import annotations

import pytest
import torch
from torch.utils import _pytree as pytree

from fxdeploy.passes.ncnn.size_operands import check, size_operands
from fxdeploy.passes.remove_asserts import remove_asserts
from fxdeploy.settings import Settings
from tests.helpers import require_target
from tests.passes.graphs import applied

aten = torch.ops.aten
SHAPES = {"x": {2: ("h", 32, 128), 3: ("w", 32, 128)}}
SIZES = ((64, 64), (40, 40), (33, 57), (96, 70), (128, 128))


class Normalized(torch.nn.Module):
    """Coordinates normalized by the image's size, a scale by its width, a flip, a threshold, and a 0-d
    weight over the height."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("base", torch.linspace(0, 1, 5))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h, w = x.shape[2], x.shape[3]
        weight = self.base.sum() / (h - 1)
        return x / (h - 1), (x + w) * (w / 2) - h, (w - 1) - x, x * (x * 100 > h).float(), x * weight


class Wrapped(torch.nn.Module):
    """Values wrapped to the width: ncnn's own remainder is not PyTorch's (the bisection runs it on the host)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * 100) % x.shape[3]


def _graph(model: torch.nn.Module) -> torch.fx.GraphModule:
    h, w = torch.export.Dim("h", min=32, max=128), torch.export.Dim("w", min=32, max=128)
    program = torch.export.export(model, (torch.randn(1, 3, 64, 64),), dynamic_shapes={"x": {2: h, 3: w}})
    return remove_asserts(program.module(check_guards=False), Settings()).graph_module


def _by_sizes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The ops that take a run-time size as their second operand."""
    sizes = (torch.SymInt, torch.SymFloat)
    return [n for n in gm.graph.nodes if n.op == "call_function" and len(n.args) > 1
            and isinstance(n.args[1], torch.fx.Node) and isinstance(n.args[1].meta.get("val"), sizes)]


@pytest.mark.parametrize(("model", "taken"), [(Normalized(), 7), (Wrapped(), 1)])
def test_each_operand_of_a_size_is_a_filled_tensor_and_the_values_are_eagers_bit_for_bit(
    model: torch.nn.Module, taken: int,
) -> None:
    gm = _graph(model)
    assert [check(n) for n in _by_sizes(gm)] == [None] * taken
    gm = applied(size_operands, gm)
    assert [n.target for n in _by_sizes(gm)] == [aten.full.default] * taken
    for size in SIZES:
        x = torch.randn(1, 3, *size)
        for got, want in zip(pytree.tree_leaves(gm(x)), pytree.tree_leaves(model(x)), strict=True):
            assert torch.equal(got, want), size


class Columns(torch.nn.Module):
    """An integer index's column and its fraction of the width: exact in int64."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w = x.shape[3]
        idx = x.flatten(2).argmax(-1)
        return idx % w, idx / w


def test_an_integer_index_by_a_size_is_eagers_in_its_dtype() -> None:
    model = Columns()
    gm = applied(size_operands, _graph(model))
    for size in SIZES:
        x = torch.randn(1, 3, *size)
        for got, want in zip(gm(x), model(x), strict=True):
            assert got.dtype == want.dtype and torch.equal(got, want), size


def test_only_a_tensor_whose_dtype_holds_the_size_is_taken() -> None:
    graph = torch.fx.Graph()
    x, n = graph.placeholder("x"), graph.placeholder("n")
    x.meta["val"], n.meta["val"] = torch.zeros(2, 3, dtype=torch.float16), 3
    half = graph.call_function(aten.div.Tensor, (x, n))
    assert check(half) == "its first operand is not a float32, int64 or int32 tensor"
    x.meta["val"] = torch.zeros(2, 3)
    assert check(graph.call_function(aten.div.Tensor, (x, n))) == "its second operand is not a run-time size"
    assert check(graph.call_function(aten.div.Tensor_mode, (x, n), {"rounding_mode": "floor"})).startswith("not a")
    assert check(graph.call_function(aten.pow.Tensor_Scalar, (x, n))).startswith("not a")


@pytest.mark.parametrize("model", [Normalized(), Wrapped()], ids=["normalized", "wrapped"])
def test_a_division_by_the_height_is_eagers_on_ncnn_at_every_size(model: torch.nn.Module) -> None:
    require_target("ncnn")
    import fxdeploy

    deployed = fxdeploy.lower(model.eval(), (torch.randn(1, 3, 64, 64),), target="ncnn", dynamic_shapes=SHAPES)
    for size in SIZES:
        x = torch.randn(1, 3, *size)
        with torch.no_grad():
            for got, want in zip(pytree.tree_leaves(deployed(x)), pytree.tree_leaves(model(x)), strict=True):
                assert got.shape == want.shape, size
                assert float((got - want).abs().max()) <= 1e-4 * max(1.0, float(want.abs().max())), size


class Means(torch.nn.Module):
    """Unbiased means of a batch over the whole image and over each row: two sizes, at two ranks."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h, w = x.shape[2], x.shape[3]
        return x.sum((2, 3), keepdim=True) / (h * w - 1), x.sum(-1) / (w - 1)


def test_two_sizes_at_two_ranks_are_per_image_inputs_made_on_the_host() -> None:
    """A filled tensor of ones' shape was taken whole by every image, with ncnn's leading 1: the
    [1, 1, 1, 1] became a 5-D blob, and lower() refused the graph (neither layout gave its values)."""
    require_target("ncnn")
    import fxdeploy

    model = Means().eval()
    shapes = {"x": {0: ("batch", 1, 4), **SHAPES["x"]}}
    deployed = fxdeploy.lower(model, (torch.randn(2, 3, 64, 64),), target="ncnn", dynamic_shapes=shapes)
    assert [stage["kind"] for stage in deployed.manifest["info"]["ncnn"]["stages"]] == ["empty", "host", "engine"]
    for batch, size in zip((1, 3, 2, 4, 1), SIZES, strict=True):
        x = torch.randn(batch, 3, *size)
        with torch.no_grad():
            for got, want in zip(deployed(x), model(x), strict=True):
                assert got.shape == want.shape, (batch, size)
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
