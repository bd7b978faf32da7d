"""Models that write into their inputs, directly or through eval-mode dropout (which returns its
input itself), lowered with the default settings: the artifact returns eager's outputs, lower()
leaves the user's example as it was, and lower()'s check catches a capture that misses the write.

Found by the translation-validation grammar: ``v0 = F.dropout(x, p, self.training)``, then
``v0[v0 > -0.5] = 0``, then ``F.linear(x, w)``. torch.export's graph treated the dropout as a copy,
so the linear read ``x`` unwritten; lower()'s check ran eager on the example it had already
written into (the write is idempotent), so the wrong artifact passed it.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fxdeploy
from fxdeploy.capture import functional
from fxdeploy.errors import LoweringError
from tests.helpers import require_target

TARGETS = ["onnxruntime", "torchscript"]


class WritesThroughDropout(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 8, generator=torch.Generator().manual_seed(0)))
        self.drop = nn.Dropout2d(0.5)

    def forward(self, x: torch.Tensor, image: torch.Tensor) -> tuple[torch.Tensor, ...]:
        v0 = F.dropout(x, 0.25, self.training)
        v0[v0 > -0.5] = 0.0
        self.drop(image).mul_(2.0)
        return v0, F.linear(x, self.w), image.mean((2, 3))


class WritesItsInput(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x[:, 0] = 1.0
        return x.mul_(2.0)


def _inputs(*shapes: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(1)
    return tuple(torch.randn(shape, generator=generator) for shape in shapes)


def _assert_matches_eager(deployed: fxdeploy.Deployed, model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
    want = model(*[x.clone() for x in inputs])
    got = deployed(*[x.clone() for x in inputs])
    want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert torch.allclose(a, b, atol=1e-5), f"output #{i} differs by {(a - b).abs().max():.3g}"


@pytest.mark.parametrize("target", TARGETS)
def test_writes_through_eval_dropout_reach_the_input(target: str) -> None:
    require_target(target)
    model = WritesThroughDropout().eval()
    example = _inputs((3, 8), (2, 3, 5, 5))
    given = [x.clone() for x in example]
    deployed = fxdeploy.lower(model, example, target=target)
    assert all(torch.equal(a, b) for a, b in zip(example, given, strict=True)), "lower() wrote into the example"
    _assert_matches_eager(deployed, model, _inputs((3, 8), (2, 3, 5, 5)))


@pytest.mark.parametrize("target", TARGETS)
def test_a_model_returning_the_input_it_wrote(target: str) -> None:
    require_target(target)
    model = WritesItsInput()
    (example,) = _inputs((3, 5))
    given = example.clone()
    deployed = fxdeploy.lower(model, (example,), target=target)
    assert torch.equal(example, given), "lower() wrote into the example"
    _assert_matches_eager(deployed, model, _inputs((3, 5)))
    fresh = _inputs((3, 5))[0]
    kept = fresh.clone()
    deployed(fresh)
    assert torch.equal(fresh, kept), "the artifact wrote into the array it was given"


def test_the_check_refuses_a_capture_that_misses_the_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the capture's dropout rule off (the capture as it was), lower()'s own check must see
    that the artifact's linear reads an unwritten input: its eager reference runs on copies."""
    require_target("onnxruntime")
    monkeypatch.setattr(functional, "_alias_eval_dropouts", lambda gm: None)
    with pytest.raises(LoweringError, match=r"output #1 differs from eager"):
        fxdeploy.lower(WritesThroughDropout().eval(), _inputs((3, 8), (2, 3, 5, 5)), target="onnxruntime")
