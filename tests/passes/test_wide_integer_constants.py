"""wide_integer_constants: OpenVINO computes int64 as int32, so a number past int32 in the code came
back converted (an INT64_MAX sentinel as 2147483520), silently where lower()'s example never reached
it. Refused on OpenVINO naming the line; slices to the end (their 2**63 - 1) and numbers within int32
lower, and ONNX Runtime computes int64."""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from fxdeploy.errors import PassError
from fxdeploy.passes.wide_integer_constants import check
from tests.helpers import require_target

BIG = torch.iinfo(torch.int64).max


class Sentinel(torch.nn.Module):
    """The smallest positive id of each row, the sentinel where it has none."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.where(ids > 0, ids, BIG).min(1).values


class Table(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("offsets", torch.tensor([1, 2**40]))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return ids + self.offsets[ids.clamp(0, 1)]


class Narrow(torch.nn.Module):
    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return ids[:, 1:], torch.where(ids > 0, ids, 2**24).min(1).values, ids.float() * 2**40, ids == -(2**31)


def _nodes(model: torch.nn.Module, ids: torch.Tensor) -> list[torch.fx.Node]:
    graph = torch.export.export(model, (ids,)).run_decompositions({}).graph
    return [n for n in graph.nodes if n.op == "call_function"]


def test_check_finds_the_wide_number_only() -> None:
    ids = torch.tensor([[1, -5, 3]])
    assert [check(n) is None for n in _nodes(Sentinel(), ids)] == [False, True, False, False]
    assert all(check(n) is not None for n in _nodes(Narrow(), ids))


@pytest.mark.parametrize("model", [Sentinel(), Table()])
def test_openvino_refuses_a_number_past_int32_naming_the_line(model: torch.nn.Module) -> None:
    require_target("openvino")
    ids = torch.tensor([[1, 5, -3, 7], [2, -1, 3, 4]])  # every row has a positive id: the check passed
    with pytest.raises(PassError, match=r"test_wide_integer_constants\.py.* holds 1099511627776, past int32's range"
                       if isinstance(model, Table) else r"test_wide_integer_constants\.py.*past int32's range"):
        fxdeploy.lower(model, (ids,), target="openvino")


@pytest.mark.parametrize(("target", "model"), [("openvino", Narrow()), ("onnxruntime", Narrow()),
                                               ("onnxruntime", Sentinel())])
def test_numbers_within_int32_and_int64_on_onnx_runtime_keep_eagers_values(target: str, model: torch.nn.Module) -> None:
    require_target(target)
    deployed = fxdeploy.lower(model, (torch.tensor([[1, 5, -3, 7], [2, -1, 3, 4]]),), target=target)
    ids = torch.tensor([[-1, -5, -3, -7], [2, -(2**31), 3, 4]])
    got, want = deployed(ids), model(ids)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,),
                    strict=True):
        assert torch.equal(g, w)
