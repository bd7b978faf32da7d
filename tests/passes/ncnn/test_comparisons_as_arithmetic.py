"""comparisons_as_arithmetic: a float comparison read as a 0/1 float mask becomes abs, clamp, ceil and
subtractions, bit for bit the same wherever the difference of its operands is not NaN."""

from __future__ import annotations

import logging

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fxdeploy
from fxdeploy.passes import op_histogram
from fxdeploy.passes.ncnn.comparisons_as_arithmetic import comparisons_as_arithmetic
from fxdeploy.settings import Settings
from tests.helpers import require_target
from tests.passes.graphs import applied, build

aten = torch.ops.aten
COMPARISONS = [aten.eq, aten.ne, aten.gt, aten.ge, aten.lt, aten.le]
TINY = torch.finfo(torch.float32).smallest_normal
EDGES = [0.0, -0.0, 1e-45, -1e-45, 3e-42, TINY, -TINY, TINY * (1 + 2**-23), 1.0, 1.0 + 2**-23, 1.0 - 2**-24,
         -1.0, 0.5, 16777216.0, 16777218.0, 3.4e38, -3.4e38, 1e30, float("inf"), float("-inf")]
"""Signed zeros, subnormals, the smallest normals and their neighbours, neighbours of 1, large values
whose difference overflows, infinities: float32 values where a comparison is easy to get wrong."""
BOUND = 1e30  # the clamp that makes one operand finite by construction


def edge_tensor(indices: list[int]) -> torch.Tensor:
    return torch.tensor([EDGES[i] for i in indices], dtype=torch.float32)


def bitwise_same(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got.isnan(), want.isnan())
    numbers = ~want.isnan()
    assert torch.equal(got[numbers].view(torch.int32), want[numbers].view(torch.int32)), (got, want)


def comparison_graph(op: object, bounded_first: bool, reader: str, n: int) -> torch.fx.GraphModule:
    """``op(a, b)`` of a clamped (finite) and a free operand, read as ``.float()`` or in a product."""

    def body(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> tuple[torch.fx.Node, ...]:
        finite = g.call_function(aten.clamp.default, (xs[0], -BOUND, BOUND))
        a, b = (finite, xs[1]) if bounded_first else (xs[1], finite)
        mask = g.call_function(op.Tensor, (a, b))
        if reader == "cast":
            return (g.call_function(aten._to_copy.default, (mask,), {"dtype": torch.float32}),)
        return (g.call_function(aten.mul.Tensor, (xs[1], mask)),)

    return build(body, 2, [torch.zeros(n), torch.zeros(n)])


@settings(max_examples=80, deadline=None)
@given(op=st.sampled_from(COMPARISONS), bounded_first=st.booleans(), reader=st.sampled_from(["cast", "product"]),
       pairs=st.lists(st.tuples(st.integers(0, len(EDGES) - 1), st.integers(0, len(EDGES) - 1)), min_size=1,
                      max_size=12))
def test_every_comparison_keeps_every_bit(op: object, bounded_first: bool, reader: str,
                                          pairs: list[tuple[int, int]]) -> None:
    x0, x1 = edge_tensor([p[0] for p in pairs]), edge_tensor([p[1] for p in pairs])
    gm = comparison_graph(op, bounded_first, reader, len(pairs))
    want = gm(x0, x1)[0]
    rewritten = applied(comparisons_as_arithmetic, gm)
    ops = op_histogram(rewritten)
    assert not {f"{op}.Tensor", "aten._to_copy.default"} & set(ops), ops
    assert {"aten.clamp.default", "aten.ceil.default"} <= set(ops), ops
    bitwise_same(rewritten(x0, x1)[0], want)


def test_every_pair_of_edge_values_under_every_comparison() -> None:
    """The whole cross product, at once, for each comparison: the exhaustive form of the property above."""
    left, right = torch.meshgrid(torch.arange(len(EDGES)), torch.arange(len(EDGES)), indexing="ij")
    x0, x1 = edge_tensor(left.flatten().tolist()), edge_tensor(right.flatten().tolist())
    for op in COMPARISONS:
        for bounded_first in (True, False):
            gm = comparison_graph(op, bounded_first, "cast", len(x0))
            want = gm(x0, x1)[0]
            bitwise_same(applied(comparisons_as_arithmetic, gm)(x0, x1)[0], want)


@pytest.mark.parametrize("op", COMPARISONS, ids=str)
@pytest.mark.parametrize("number", [0.1, 16777217, -0.0, 1e-45])
def test_a_comparison_with_a_number_rounds_the_number_as_pytorch_does(op: object, number: float) -> None:
    """PyTorch compares a float32 tensor with a number cast to float32 (16777217 is 16777216 there);
    the subtraction casts it the same way."""

    def body(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> torch.fx.Node:
        return g.call_function(aten.mul.Tensor, (xs[0], g.call_function(op.Scalar, (xs[0], number))))

    x = torch.cat([edge_tensor(list(range(len(EDGES)))), torch.tensor([0.1, 16777216.0, 16777217.0])])
    gm = build(body, 1, [torch.zeros(len(x))])
    want = gm(x)
    bitwise_same(applied(comparisons_as_arithmetic, gm)(x), want)


def centernet_peaks(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> torch.fx.Node:
    heat = g.call_function(aten.sigmoid.default, (xs[0],))
    hmax = g.call_function(aten.max_pool2d.default, (heat, [3, 3], [1, 1], [1, 1]))
    keep = g.call_function(aten.to.dtype, (g.call_function(aten.eq.Tensor, (hmax, heat)), torch.float32))
    return g.call_function(aten.mul.Tensor, (heat, keep))


def test_centernets_peak_extraction() -> None:
    """A sigmoid is within 1 whatever its input: both operands are finite by construction."""
    gm = build(centernet_peaks, 1, [torch.zeros(1, 2, 8, 8)])
    x = torch.randn(1, 2, 8, 8) * 4
    x[0, 0, :3, :3] = 0.25  # a plateau: tied maxima, all kept
    x[0, 1, 4, 4], x[0, 1, 5, 5] = float("inf"), -float("inf")
    want = gm(x)
    rewritten = applied(comparisons_as_arithmetic, gm)
    assert "aten.eq.Tensor" not in op_histogram(rewritten)
    bitwise_same(rewritten(x), want)


def unbounded(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> torch.fx.Node:
    return g.call_function(aten._to_copy.default, (g.call_function(aten.eq.Tensor, (xs[0], xs[1])),),
                           {"dtype": torch.float32})


def as_where(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> torch.fx.Node:
    mask = g.call_function(aten.gt.Scalar, (xs[0], 0.5))
    return g.call_function(aten.where.self, (mask, xs[0], xs[1]))


def as_int(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> torch.fx.Node:
    mask = g.call_function(aten.gt.Scalar, (xs[0], 0.5))
    return g.call_function(aten._to_copy.default, (mask,), {"dtype": torch.int64})


def as_output(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> tuple[torch.fx.Node, torch.fx.Node]:
    mask = g.call_function(aten.gt.Scalar, (xs[0], 0.5))
    return mask, g.call_function(aten.mul.Tensor, (xs[1], mask))


def of_doubles(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> torch.fx.Node:
    doubled = g.call_function(aten._to_copy.default, (xs[0],), {"dtype": torch.float64})
    mask = g.call_function(aten.gt.Scalar, (doubled, 0.5))
    return g.call_function(aten._to_copy.default, (mask,), {"dtype": torch.float32})


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (unbounded, "neither operand is known to be finite"),
        (as_where, "reads it as a bool"),
        (as_int, "casts it to another dtype"),
        (as_output, "reads it as a bool"),
        (of_doubles, "not float32"),
    ],
    ids=["unbounded", "where", "int", "output", "doubles"],
)
def test_comparisons_it_cannot_spell_exactly_stay_with_the_reason(
    body: object, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    x = [torch.tensor([0.0, 0.5, 1.0, float("inf")]), torch.tensor([0.0, 0.25, 1.0, float("inf")])]
    gm = build(body, 2, x)
    want = gm(*x)
    with caplog.at_level(logging.DEBUG, logger="fxdeploy.passes.ncnn.comparisons_as_arithmetic"):
        result = comparisons_as_arithmetic(gm, Settings())
    assert not result.modified and reason in caplog.text
    result.graph_module.recompile()
    got = result.graph_module(*x)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,),
                    strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)


LOGIC = {"and": aten.__and__.Tensor, "logical_and": aten.logical_and.default, "product": aten.mul.Tensor,
         "or": aten.__or__.Tensor, "logical_or": aten.logical_or.default, "xor": aten.__xor__.Tensor,
         "bitwise_xor": aten.bitwise_xor.Tensor}


@settings(max_examples=60, deadline=None)
@given(first=st.sampled_from(COMPARISONS), second=st.sampled_from(COMPARISONS), logic=st.sampled_from(sorted(LOGIC)),
       negate=st.booleans(), pairs=st.lists(st.tuples(st.integers(0, len(EDGES) - 1), st.integers(0, len(EDGES) - 1)),
                                            min_size=1, max_size=12))
def test_bool_logic_of_comparisons_read_as_numbers_keeps_every_bit(
    first: object, second: object, logic: str, negate: bool, pairs: list[tuple[int, int]]
) -> None:
    """``(a op1 b) logic (b op2 a)``, maybe negated, read by a product: the masks' product, maximum,
    difference and complement are exact on 0s and 1s, whatever the comparisons give."""

    def body(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> torch.fx.Node:
        finite = g.call_function(aten.clamp.default, (xs[0], -BOUND, BOUND))
        both = g.call_function(LOGIC[logic], (g.call_function(first.Tensor, (finite, xs[1])),
                                              g.call_function(second.Tensor, (xs[1], finite))))
        mask = g.call_function(aten.bitwise_not.default, (both,)) if negate else both
        return g.call_function(aten.mul.Tensor, (xs[1], mask))

    x0, x1 = edge_tensor([p[0] for p in pairs]), edge_tensor([p[1] for p in pairs])
    gm = build(body, 2, [torch.zeros(len(pairs)), torch.zeros(len(pairs))])
    want = gm(x0, x1)
    rewritten = applied(comparisons_as_arithmetic, gm)
    assert not {"aten.__and__.Tensor", "aten.bitwise_not.default", f"{first}.Tensor"} & set(op_histogram(rewritten))
    bitwise_same(rewritten(x0, x1), want)


def logic_read_as_bool(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> tuple[torch.fx.Node, torch.fx.Node]:
    both = g.call_function(aten.__and__.Tensor, (g.call_function(aten.gt.Scalar, (xs[0], 0.5)),
                                                 g.call_function(aten.lt.Scalar, (xs[0], 0.75))))
    return g.call_function(aten.where.self, (both, xs[0], xs[1])), g.call_function(aten.mul.Tensor, (xs[1], both))


def test_logic_that_another_reader_takes_as_bool_keeps_its_comparisons(caplog: pytest.LogCaptureFixture) -> None:
    x = [torch.tensor([0.0, 0.6, 1.0]), torch.tensor([1.0, 2.0, 3.0])]
    gm = build(logic_read_as_bool, 2, x)
    with caplog.at_level(logging.DEBUG, logger="fxdeploy.passes.ncnn.comparisons_as_arithmetic"):
        assert not comparisons_as_arithmetic(gm, Settings()).modified
    assert "stays bool" in caplog.text and "reads it as a bool" in caplog.text


class BoxCrop(torch.nn.Module):
    """Prototype masks cropped to boxes as YOLO-seg's ``crop_mask`` writes it (bool products), and
    with ``&`` and ``|``, at a dynamic height and width."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.register_buffer("boxes", torch.tensor([[0, 0, 0.5, 0.5], [0.25, 0.2, 1, 1], [0, 0.5, 1, 0.9],
                                                    [0.1, 0.1, 0.9, 0.6]]))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        masks = self.conv(x).sigmoid()
        h, w = masks.shape[-2:]
        x1, y1, x2, y2 = (self.boxes[:, i, None, None] for i in range(4))
        r = torch.arange(w, dtype=torch.float32)[None, None, :] / w
        c = torch.arange(h, dtype=torch.float32)[None, :, None] / h
        crop = masks * ((r >= x1) * (r < x2) * (c >= y1) * (c < y2))
        outside = masks * ~((r >= x1) & (r < x2) | (c > 0.5))
        return crop, outside


def test_a_box_crop_of_masks_runs_on_ncnn_at_a_dynamic_size() -> None:
    """pnnx writes the comparisons and bool logic as Tensor.to and friends, which ncnn has no
    layers for: lowering refused before this pass spelled the logic too."""
    require_target("ncnn")
    model = BoxCrop().eval()
    deployed = fxdeploy.lower(model, (torch.rand(1, 3, 64, 48),), target="ncnn",
                              dynamic_shapes={"x": {2: ("h", 32, 96), 3: ("w", 32, 96)}})
    for shape in [(1, 3, 40, 72), (1, 3, 96, 32), (1, 3, 33, 57)]:
        x = torch.rand(shape)
        for got, want in zip(deployed(x), model(x), strict=True):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def logic_with_an_unbounded_comparison(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> torch.fx.Node:
    both = g.call_function(aten.__and__.Tensor, (g.call_function(aten.gt.Scalar, (xs[0], 0.5)),
                                                 g.call_function(aten.eq.Tensor, (xs[0], xs[1]))))
    return g.call_function(aten.mul.Tensor, (xs[1], both))


def test_logic_of_a_comparison_that_stays_keeps_the_other_too(caplog: pytest.LogCaptureFixture) -> None:
    """``(x > 0.5) & (x == y)``: x == y of two unbounded values stays, so the & reads a bool, and
    x > 0.5 stays for it (rewriting it alone would leave the & reading a float)."""
    x = [torch.tensor([0.0, 0.6, 1.0, float("inf")]), torch.tensor([0.0, 0.6, 2.0, float("inf")])]
    gm = build(logic_with_an_unbounded_comparison, 2, x)
    with caplog.at_level(logging.DEBUG, logger="fxdeploy.passes.ncnn.comparisons_as_arithmetic"):
        assert not comparisons_as_arithmetic(gm, Settings()).modified
    assert "neither operand is known to be finite" in caplog.text and "stays bool" in caplog.text
