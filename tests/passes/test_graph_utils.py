"""graph_utils: call sites skip torch's and fxdeploy's own frames; inserted nodes get a line;
refresh_meta names the node whose shapes fail, and keeps torch's log of it quiet."""

from __future__ import annotations

import logging
import os

import pytest
import torch

import fxdeploy
from fxdeploy.passes.graph_utils import MetaError, call_site, inherit_stack_traces, refresh_meta, stamp_inserted
from tests.passes.graphs import aten, build
from tests.passes.padding.helpers import captured

USER = 'File "/home/me/model.py", line 12, in forward\n    y = helper(x)\n'
HELPER = 'File "/home/me/model.py", line 40, in helper\n    return nms(b, s, 0.5)\n'
LIBRARY = f'File "{os.path.dirname(fxdeploy.__file__)}/ops/__init__.py", line 90, in nms\n    return op(b)\n'
TORCH = f'File "{os.path.dirname(torch.__file__)}/nn/modules/module.py", line 1, in _call_impl\n    x\n'


def _graph() -> torch.fx.GraphModule:
    def body(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> torch.fx.Node:
        return g.call_function(aten.relu.default, (g.call_function(aten.mul.Tensor, (xs[0], 2.0)),))

    gm = build(body, 1, [torch.rand(3)])
    for node in gm.graph.nodes:
        if node.op == "call_function":
            node.meta["stack_trace"] = USER + HELPER if node.target is aten.relu.default else USER
    return gm


def test_call_site_is_the_innermost_frame_outside_torch_and_fxdeploy() -> None:
    node = next(iter(_graph().graph.nodes))
    node.meta["stack_trace"] = USER + HELPER + LIBRARY + TORCH
    assert call_site(node) == 'File "/home/me/model.py", line 40, in helper'
    node.meta["stack_trace"] = None
    assert call_site(node) == f"node {node.name}"


def test_nodes_inserted_for_an_op_take_its_line() -> None:
    gm = _graph()
    known = set(gm.graph.nodes)
    relu = next(n for n in gm.graph.nodes if n.target is aten.relu.default)
    before = relu.prev
    with gm.graph.inserting_before(relu):
        clamped = gm.graph.call_function(aten.clamp.default, (relu.args[0], 0.0))
        doubled = gm.graph.call_function(aten.mul.Tensor, (clamped, 1.0))
    relu.replace_all_uses_with(doubled)
    gm.graph.erase_node(relu)
    inherit_stack_traces(before, relu, known)
    assert call_site(clamped) == call_site(doubled) == 'File "/home/me/model.py", line 40, in helper'
    assert {clamped, doubled} <= known


def test_a_pass_that_does_not_say_gets_the_line_of_the_op_it_inserted_before() -> None:
    gm = _graph()
    known = set(gm.graph.nodes)
    relu = next(n for n in gm.graph.nodes if n.target is aten.relu.default)
    with gm.graph.inserting_before(relu):
        cast = gm.graph.call_function(aten._to_copy.default, (relu.args[0],), {"dtype": torch.float16})
    relu.args = (cast,)
    stamp_inserted(gm, known)
    assert call_site(cast) == 'File "/home/me/model.py", line 40, in helper'



class Where(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0.5, x, 0.0)


def _where(gm: torch.fx.GraphModule) -> torch.fx.Node:
    return next(n for n in gm.graph.nodes if str(n.target).startswith("aten.where."))


def test_refresh_meta_recomputes_values_after_a_rewrite() -> None:
    gm = captured(Where(), torch.rand(6))
    where = _where(gm)
    with gm.graph.inserting_before(where):  # a [6] operand made [2, 6]
        wide = gm.graph.call_function(torch.ops.aten.expand.default, (where.args[1], [2, 6]))
    where.args = (where.args[0], wide, *where.args[2:])
    refresh_meta(gm)
    assert tuple(where.meta["val"].shape) == (2, 6)


class _Upsample(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.interpolate(x, scale_factor=2.0, mode="nearest") + 1


def test_refresh_meta_keeps_a_dynamic_size_that_an_upsample_scales() -> None:
    """``upsample_nearest2d.vec`` with scale factors: its C++ kernel reads the input's sizes as
    ints, which fixed a dynamic H and W at the example's (YOLO's neck, at 10 x 10); recomputed
    the way torch.export traced it (the Python dispatcher), the sizes stay symbolic."""
    from fxdeploy.capture import capture

    h, w = torch.export.Dim("h", min=2, max=64), torch.export.Dim("w", min=2, max=64)
    result = capture(_Upsample(), (torch.rand(1, 3, 10, 12),), dynamic_shapes={"x": {2: h, 3: w}})
    gm = result.graph_module
    refresh_meta(gm)
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    value = (out[0] if isinstance(out, (tuple, list)) else out).meta["val"]
    assert [isinstance(size, torch.SymInt) for size in value.shape] == [False, False, True, True], value.shape
    env = value.shape[2].node.shape_env
    assert not [s for s, v in env.replacements.items() if v.is_number], env.replacements


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_a_failing_op_is_named_and_torch_prints_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    """torch's fake tensors log the failed meta kernel with a traceback to their own stderr
    handler (not pytest's): a handler beside it sees what would have been printed."""
    gm = captured(Where(), torch.rand(6))
    where = _where(gm)
    with gm.graph.inserting_before(where):  # an integer predicate, which where refuses
        number = gm.graph.call_function(torch.ops.aten._to_copy.default, (where.args[0],), {"dtype": torch.long})
    where.args = (number, *where.args[1:])
    seen = _Records()
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    logger.addHandler(seen)
    try:
        says = r"aten\.where\.\w+ fails on the rewritten graph .*expected predicate"
        with pytest.raises(MetaError, match=says) as info:
            refresh_meta(gm)
    finally:
        logger.removeHandler(seen)
    assert not seen.records, [r.getMessage() for r in seen.records]
    assert __file__ in str(info.value)  # the call site of the op
    out, err = capfd.readouterr()
    assert out == "" and err == "", err
