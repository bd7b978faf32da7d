"""A model or inputs on an accelerator: captured from a CPU copy, outputs back on the inputs' device.

The CPU-only cases check the copy and the dynamo-graph rewrite; the CUDA cases (skipped where
torch sees no CUDA device) run lower() and torch.compile end to end on CUDA tensors."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import fxdeploy
from fxdeploy.capture.devices import cpu_copy, graph_on_cpu, on_cpu
from fxdeploy.targets import get_target

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch sees none)")


@pytest.fixture(autouse=True)
def _exact_cuda_float32():
    """cuDNN's TF32 convolutions differ from the CPU's by about 1e-3, enough to move a score across
    the loop detector's threshold; full float32 on the GPU for these comparisons."""
    if not torch.cuda.is_available():
        yield
        return
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def _graph_with_cuda_constants() -> torch.fx.GraphModule:
    """What dynamo records for ``x + arange(3, device=x.device) + ones(3, device="cuda:0")`` then
    ``.to("cuda").cuda().to(device, float64)`` on a CUDA input: the devices as constants."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    ramp = graph.call_function(torch.arange, (3,), {"device": torch.device("cuda", 0), "dtype": torch.float32})
    ones = graph.call_function(torch.ones, (3,), {"device": "cuda:0"})
    total = graph.call_function(torch.add, (graph.call_function(torch.add, (x, ramp)), ones))
    moved = graph.call_method("cuda", (graph.call_method("to", (total, "cuda")),))
    graph.output(graph.call_method("to", (moved, torch.device("cuda"), torch.float64)))
    return torch.fx.GraphModule(nn.Module(), graph)


def test_a_dynamo_graph_with_device_constants_runs_on_the_cpu_after_the_rewrite() -> None:
    gm = _graph_with_cuda_constants()
    moved = graph_on_cpu(gm)
    out = moved(torch.zeros(3))
    assert out.dtype == torch.float64 and out.tolist() == [1.0, 2.0, 3.0]
    assert not any(spelling in moved.code for spelling in ("'cuda", "type='cuda'", ".cuda()"))
    assert ".cuda()" in gm.code  # the graph dynamo gave (run eagerly on a fallback) is left as it was


def test_the_cpu_copy_shares_nothing_and_keeps_tied_weights_tied() -> None:
    model = nn.Sequential(nn.Embedding(5, 4), nn.Linear(4, 5, bias=False))
    model[1].weight = model[0].weight  # tied, as language models tie their embeddings
    model.register_buffer("scale", torch.tensor(2.0))
    copy = cpu_copy(model)
    assert copy[0].weight is copy[1].weight and copy[0].weight is not model[0].weight
    assert isinstance(copy[0].weight, nn.Parameter) and copy[0].weight.requires_grad
    assert copy.scale.data_ptr() != model.scale.data_ptr()
    with torch.no_grad():
        copy[0].weight.zero_()
    assert model[0].weight.abs().sum() > 0


def test_a_model_on_the_cpu_is_captured_as_it_is() -> None:
    model, x = nn.Linear(2, 2), torch.randn(1, 2)
    got_model, (got_x,), kwargs = on_cpu(model, (x,), None)
    assert got_model is model and got_x is x and kwargs is None


class _LoopDetector(nn.Module):
    """A per-image loop that makes its tensors on its input's device."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Conv2d(3, 7, 4, stride=4)

    def forward(self, images: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        out = self.head(images).flatten(2).transpose(1, 2)
        grid = torch.arange(out.shape[1], device=images.device, dtype=images.dtype)
        results = []
        for rows in out:
            xy = torch.stack([grid % 8, grid // 8], -1) * 4 + rows[:, :2].sigmoid() * 4
            wh = rows[:, 2:4].sigmoid() * 16 + 2
            scores, labels = rows[:, 4:].sigmoid().max(-1)
            keep = scores > 0.3
            results.append({"boxes": torch.cat([xy - wh / 2, xy + wh / 2], -1)[keep], "scores": scores[keep],
                            "labels": labels[keep]})
        return results


def _models() -> list[tuple[str, nn.Module]]:
    torch.manual_seed(0)
    classifier = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                               nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
    return [("classifier", classifier.eval()), ("loop detector", _LoopDetector().eval())]


def _assert_like(got: object, want: object, tol: float) -> None:
    got_leaves, want_leaves = torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)
    assert len(got_leaves) == len(want_leaves)
    for g, w in zip(got_leaves, want_leaves, strict=True):
        assert g.device == w.device, (g.device, w.device)
        assert g.shape == w.shape and g.dtype == w.dtype
        if g.numel():
            assert (g.double() - w.double()).abs().max().item() <= tol


@CUDA
@pytest.mark.parametrize("target", ["onnxruntime", "torchscript"])
def test_lower_takes_a_model_on_cuda_and_answers_on_cuda(target: str) -> None:
    get_target(target).require()
    for _, model in _models():
        model.cuda()
        x = torch.randn(2, 3, 32, 32, device="cuda")
        deployed = fxdeploy.lower(model, (x,), target=target)
        assert next(model.parameters()).device.type == "cuda"  # the user's model stays where it was
        with torch.no_grad():
            want = model(x)
        _assert_like(deployed(x), want, 1e-4)  # eager on the GPU, the artifact on the CPU
        _assert_like(deployed(x.cpu()), torch.utils._pytree.tree_map(lambda t: t.cpu(), want), 1e-4)


@CUDA
@pytest.mark.parametrize("backend", ["fxdeploy_ort", "fxdeploy_torchscript"])
def test_torch_compile_on_cuda_tensors_runs_the_artifact_and_answers_on_cuda(backend: str) -> None:
    from fxdeploy.integrations import backends

    for _, model in _models():
        model.cuda()
        x = torch.randn(2, 3, 32, 32, device="cuda")
        torch._dynamo.reset()
        with warnings.catch_warnings():
            warnings.simplefilter("error", fxdeploy.errors.CompileFallbackWarning)  # no eager fallback
            with torch.no_grad():
                got = torch.compile(model, backend=getattr(backends, backend))(x)
        with torch.no_grad():
            _assert_like(got, model(x), 1e-4)
