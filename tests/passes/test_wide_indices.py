"""wide_indices: an int32 index of advanced indexing reaches the exporter as int64."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import fxdeploy
from fxdeploy.passes import op_histogram
from fxdeploy.passes.wide_indices import check, wide_indices
from fxdeploy.settings import Settings
from tests.helpers import require_target
from tests.passes.graphs import applied

Op = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
OPS: dict[str, Op] = {
    "columns": lambda x, ids: x[:, ids[0]],
    "rows_and_ids": lambda x, ids: x[torch.arange(x.shape[0])[:, None], ids],
    "put": lambda x, ids: x.index_put((torch.arange(x.shape[0])[:, None], ids), torch.ones(()), accumulate=True),
}


class Indexing(torch.nn.Module):
    def __init__(self, op: Op) -> None:
        super().__init__()
        self.op = op

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return self.op(x, ids)


def _inputs(batch: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.tensor([[5, 0, 5, 2], [1, 1, 4, 3], [0, 5, 2, 2]], dtype=torch.int32)[:batch]
    return torch.arange(batch * 6 * 3, dtype=torch.float32).reshape(batch, 6, 3), ids


@pytest.mark.parametrize("op", list(OPS))
def test_the_index_is_cast_and_the_values_stay(op: str) -> None:
    model, inputs = Indexing(OPS[op]), _inputs()
    gm = applied(wide_indices, torch.export.export(model, inputs).module(check_guards=False))
    assert op_histogram(gm)["aten._to_copy.default"] >= 1
    assert all(check(n) is not None for n in gm.graph.nodes)
    assert torch.equal(gm(*inputs), model(*inputs))


@pytest.mark.parametrize(("op", "reason"), [
    (lambda x, ids: x[:, ids[0].long()], "every index is int64"),
    (lambda x, ids: x[ids[:, :1].squeeze(1) > 2], "every index is int64, or a mask"),
    (lambda x, ids: x.index_select(1, ids[0]), "not advanced indexing"),
])
def test_other_indexing_stays(op: Op, reason: str) -> None:
    gm = torch.export.export(Indexing(op), _inputs()).module(check_guards=False)
    indexing = [n for n in gm.graph.nodes if n.op == "call_function" and "index" in str(n.target)]
    assert indexing and all(reason in check(n) for n in indexing)
    assert not wide_indices(gm, Settings()).modified


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_lowered_int32_indexing_is_eager(target: str) -> None:
    """End to end: ONNX Runtime refused both models at load (GatherND's int32 indices; a Max of int64 and
    int32), OpenVINO the second; now eager's values at another batch."""
    require_target(target)
    model = Indexing(lambda x, ids: x[:, ids[0]].sum(1) + x[torch.arange(x.shape[0])[:, None], ids].sum(1))
    dynamic = {"x": {0: ("batch", 1, 4)}, "ids": {0: ("batch", 1, 4)}}
    deployed = fxdeploy.lower(model, _inputs(2), target=target, dynamic_shapes=dynamic)
    assert torch.equal(deployed(*_inputs(3)), model(*_inputs(3)))
