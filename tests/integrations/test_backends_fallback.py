"""torch.compile(backend="fxdeploy_ort") on detectors: every graph dynamo hands over that fxdeploy
can lower is lowered; one it cannot take runs eagerly with one warning naming why; nothing raises,
and the results are eager's. Runs on torch 2.13 (core) and 2.14.1 (the detector venv)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from examples.detector import tiny_yolo
from fxdeploy.errors import CompileFallbackWarning
from fxdeploy.integrations.backends import make_backend
from tests.detections import assert_same_detections
from tests.helpers import require_target


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    require_target("onnxruntime")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _recording() -> tuple[Callable[..., Any], list[Any]]:
    """fxdeploy_ort, keeping what it returns for each graph."""
    inner, runners = make_backend("onnxruntime"), []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        runners.append(inner(gm, example_inputs))
        return runners[-1]

    return backend, runners


def _run(
    model: torch.nn.Module, inputs: list[torch.Tensor], dynamic: bool | None
) -> tuple[list[Any], list[Any], list[str]]:
    backend, runners = _recording()
    compiled = torch.compile(model, backend=backend, dynamic=dynamic)
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        got = [compiled(x) for x in inputs]
        want = [model(x) for x in inputs]
    fallbacks = [str(w.message) for w in caught if issubclass(w.category, CompileFallbackWarning)]
    assert all("\n" not in text for text in fallbacks)
    return list(zip(got, want, strict=True)), runners, fallbacks


def _lowered(runners: list[Any]) -> list[Any]:
    return [r for r in runners if hasattr(r, "deployed") and r.deployed() is not None]


@pytest.mark.parametrize("dynamic", [None, False])
def test_tiny_yolo_per_image_loop(dynamic: bool | None) -> None:
    model, _ = tiny_yolo()
    images = [torch.rand(b, 3, 128, 128, generator=torch.Generator().manual_seed(b)) * 255 for b in (2, 3, 3)]
    pairs, runners, fallbacks = _run(model, images, dynamic)
    for got, want in pairs:
        assert sum(len(w["scores"]) for w in want) > 10
        assert_same_detections(want, got)
    lowered = _lowered(runners)
    assert lowered, "no graph was lowered"
    assert any(r.deployed().target == "onnxruntime" and len(r.deployed().output_names) == 2 for r in lowered)
    untaken = [r for r in runners if hasattr(r, "reason") and r.reason is not None]
    assert len(fallbacks) == len(untaken)  # one warning each


class CenterNetDecode(torch.nn.Module):
    """A CenterNet head and decode: peaks by 3x3 max-pool, top-k over classes and cells, boxes
    from the sizes and offsets at the peaks."""

    def __init__(self, classes: int = 4, k: int = 20) -> None:
        super().__init__()
        self.k = k
        conv = torch.nn.Conv2d
        self.body = torch.nn.Sequential(conv(3, 16, 3, 2, 1), torch.nn.ReLU(), conv(16, 16, 3, 2, 1))
        self.heat, self.size, self.offset = (torch.nn.Conv2d(16, c, 1) for c in (classes, 2, 2))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        f = self.body(x)
        heat = self.heat(f).sigmoid()
        b, c, h, w = heat.shape
        peaks = heat * (torch.nn.functional.max_pool2d(heat, 3, 1, 1) == heat)
        scores, index = peaks.reshape(b, -1).topk(self.k)
        classes, cell = index // (h * w), index % (h * w)
        ys, xs = (cell // w).float(), (cell % w).float()
        size = self.size(f).reshape(b, 2, -1).gather(2, cell[:, None].expand(-1, 2, -1))
        offset = self.offset(f).reshape(b, 2, -1).gather(2, cell[:, None].expand(-1, 2, -1))
        cx, cy = xs + offset[:, 0], ys + offset[:, 1]
        boxes = torch.stack((cx - size[:, 0] / 2, cy - size[:, 1] / 2, cx + size[:, 0] / 2, cy + size[:, 1] / 2), -1)
        return boxes * 4, scores, classes


@pytest.mark.parametrize("dynamic", [None, False])
def test_centernet_decode_at_batch_3(dynamic: bool | None) -> None:
    torch.manual_seed(0)
    model = CenterNetDecode().eval()
    images = [torch.rand(3, 3, 64, 64, generator=torch.Generator().manual_seed(s)) for s in (1, 2)]
    pairs, runners, fallbacks = _run(model, images, dynamic)
    for got, want in pairs:
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=0, atol=1e-4 * max(1.0, float(w.abs().max())))
    assert fallbacks == [] and len(_lowered(runners)) == len(runners) == 1  # one graph, lowered


class SizeAcrossABreak(torch.nn.Module):
    """After the break, the second graph gets the batch as a size, and no tensor holding it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        total = x.sum()
        torch._dynamo.graph_break()
        return total + torch.arange(n, dtype=x.dtype)


def test_a_size_no_tensor_holds_runs_eagerly_with_one_warning() -> None:
    model = SizeAcrossABreak()
    inputs = [torch.rand(b, 4) for b in (2, 3, 5)]
    pairs, runners, fallbacks = _run(model, inputs, dynamic=True)
    for got, want in pairs:
        torch.testing.assert_close(got, want)
    untaken = [r for r in runners if getattr(r, "reason", None)]
    assert untaken and all("that no input tensor's shape holds" in r.reason for r in untaken)
    assert len(fallbacks) == len(untaken) and fallbacks[0].startswith("fxdeploy_onnxruntime: a graph of")


@torch.library.custom_op("fxdeploy_compile_tests::quadruple", mutates_args=())
def quadruple(x: torch.Tensor) -> torch.Tensor:
    """A custom op with no ONNX translation: the ONNX lowering refuses it."""
    return x * 4


@quadruple.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class UsesACustomOp(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return quadruple(x.relu()) + 1


def test_a_lowering_refusal_runs_the_graph_eagerly_with_one_warning() -> None:
    pairs, runners, fallbacks = _run(UsesACustomOp(), [torch.randn(2, 8), torch.randn(2, 8)], dynamic=False)
    for got, want in pairs:
        torch.testing.assert_close(got, want)
    assert len(runners) == 1 and runners[0].reason is not None and "quadruple" in runners[0].reason
    assert len(fallbacks) == 1 and "quadruple" in fallbacks[0]  # the second call warns no more
