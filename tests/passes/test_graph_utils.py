"""graph_utils: refresh_meta names the node whose shapes fail, and keeps torch's log of it quiet."""

from __future__ import annotations

import logging

import pytest
import torch

from fxdeploy.passes.graph_utils import MetaError, refresh_meta
from tests.passes.padding.helpers import captured


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
