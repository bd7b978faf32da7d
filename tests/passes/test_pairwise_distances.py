"""pairwise_distances: torch.cdist spelt with broadcast differences."""

from __future__ import annotations

import math

import pytest
import torch

import fxdeploy
from fxdeploy.passes import op_histogram
from fxdeploy.passes.pairwise_distances import check, pairwise_distances
from fxdeploy.settings import Settings
from tests.helpers import require_target
from tests.passes.graphs import applied


class Distances(torch.nn.Module):
    def __init__(self, p: float = 2.0) -> None:
        super().__init__()
        self.p = p

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.cdist(a, b, p=self.p)


def _graph(model: torch.nn.Module, a: torch.Tensor, b: torch.Tensor) -> torch.fx.GraphModule:
    return torch.export.export(model, (a, b)).run_decompositions({}).module(check_guards=False)


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 2.0, 3.0, math.inf])
@pytest.mark.parametrize("shapes", [((5, 4), (3, 4)), ((2, 30, 8), (2, 40, 8)), ((2, 6, 3), (1, 7, 3))])
def test_distances_are_torchs(p: float, shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    """30 x 40 rows: torch's p = 2 kernel takes its matrix-product path there."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(shapes[0], generator=g), torch.randn(shapes[1], generator=g)
    b[..., 0, :] = a[..., 0, :] if a.shape[:-2] == b.shape[:-2] else b[..., 0, :]  # a zero distance
    model = Distances(p)
    gm = applied(pairwise_distances, _graph(model, a, b))
    assert not any("cdist" in k for k in op_histogram(gm)), op_histogram(gm)
    torch.testing.assert_close(gm(a, b), model(a, b), rtol=1e-5, atol=1e-5)


def test_a_broadcast_too_large_stays() -> None:
    gm = _graph(Distances(), torch.randn(300, 256), torch.randn(300, 256))
    node = next(n for n in gm.graph.nodes if "cdist" in str(n.target))
    assert "more than" in check(node)
    assert not pairwise_distances(gm, Settings()).modified


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_nearest_prototype_runs_on_the_onnx_runtimes(target: str) -> None:
    """Before: torch.onnx had no _cdist_forward, and lower() refused a nearest-prototype classifier."""
    require_target(target)

    class NearestPrototype(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Linear(12, 8)
            self.register_buffer("prototypes", torch.randn(5, 8, generator=torch.Generator().manual_seed(2)))

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            distances = torch.cdist(self.embed(x), self.prototypes)
            return -distances, distances.argmin(-1)

    torch.manual_seed(0)
    model = NearestPrototype().eval()
    x = torch.randn(3, 12)
    deployed = fxdeploy.lower(model, (x,), target=target, dynamic_shapes={"x": {0: ("batch", 1, 8)}})
    assert "pairwise_distances" in deployed.report.fired
    for batch in (1, 8):
        y = torch.randn(batch, 12, generator=torch.Generator().manual_seed(batch))
        (scores, labels), (want_scores, want_labels) = deployed(y), model(y)
        torch.testing.assert_close(scores, want_scores, rtol=1e-5, atol=1e-5)
        assert torch.equal(labels, want_labels)
