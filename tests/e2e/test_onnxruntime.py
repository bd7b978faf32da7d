"""Core models lowered to ONNX Runtime match eager PyTorch at two batch sizes (dynamic batch)."""

from __future__ import annotations

import pytest
import torch

import fxdeploy
from examples import models
from tests.helpers import max_abs_error

FACTORIES = {"convnet": models.convnet, "dict_mlp": models.dict_mlp, "vit_tiny": models.vit_tiny}


@pytest.fixture(scope="module", params=sorted(FACTORIES))
def lowered(request: pytest.FixtureRequest):
    model, (x,) = FACTORIES[request.param]()
    deployed = fxdeploy.lower(model, (x,), dynamic_shapes={_input_name(model): {0: ("batch", 1, 16)}})
    return model, x, deployed


def _input_name(model: torch.nn.Module) -> str:
    import inspect

    return next(iter(inspect.signature(model.forward).parameters))


@pytest.mark.parametrize("batch", [1, 5])
def test_parity_with_eager_at_two_batch_sizes(lowered, batch: int) -> None:
    model, x, deployed = lowered
    xb = torch.randn(batch, *x.shape[1:])
    with torch.no_grad():
        want = model(xb)
    got = deployed(xb)
    if hasattr(want, "to_tuple"):  # transformers ModelOutput: compare its tensors
        want, got = want.to_tuple(), got.to_tuple()
    assert max_abs_error(got, want) <= 1e-4


def test_manifest_records_dynamic_batch(lowered) -> None:
    _, _, deployed = lowered
    assert deployed.manifest["dims"]["batch"]["min"] == 1
    assert deployed.manifest["dims"]["batch"]["max"] == 16
    assert deployed.manifest["inputs"][0]["shape"][0] == "batch"
    assert deployed.manifest["runtime_version"] == fxdeploy.targets()["onnxruntime"].version


def test_dict_output_keeps_structure() -> None:
    model, (x,) = models.dict_mlp()
    deployed = fxdeploy.lower(model, (x,))
    out = deployed(x)
    assert set(out) == {"score", "extra"} and isinstance(out["extra"], list) and len(out["extra"]) == 2
    assert deployed.output_names == ["score", "extra.0", "extra.1"]


def test_stats_count_every_execute_call() -> None:
    model, (x,) = models.dict_mlp()
    deployed = fxdeploy.lower(model, (x,))
    for _ in range(7):
        deployed(x)
    stats = deployed.stats
    assert stats.count == 7
    assert 0 < stats.min <= stats.median <= stats.p90 <= stats.p99 <= stats.max
