"""stacks: a node made by an op in a helper that forward calls names the helper's line, in either
capture mode, and so does a refusal of that op, and what a pass puts in the op's place."""

from __future__ import annotations

import inspect

import pytest
import torch

import fxdeploy
from fxdeploy.capture import capture
from fxdeploy.errors import PassError
from fxdeploy.ops import nms
from fxdeploy.passes import run_pipeline
from fxdeploy.passes.graph_utils import call_site
from fxdeploy.passes.padding import pad_compactions
from fxdeploy.passes.pipelines import CLEANUP
from fxdeploy.settings import CaptureSettings, Settings


def postprocess(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    kept = x[x[:, 4] > 0.5]
    reversed_scores = kept[:, 4].flip(0)  # refused: the padding would come first
    return kept, reversed_scores


def suppress(x: torch.Tensor) -> torch.Tensor:
    kept = x[x[:, 4] > 0.5]
    return kept[nms(kept[:, :4], kept[:, 4], 0.5)]


class CallsAHelper(torch.nn.Module):
    def __init__(self, helper: object) -> None:
        super().__init__()
        self.helper = helper

    def forward(self, x: torch.Tensor) -> object:
        return self.helper(x * 2)


def _line(function: object, text: str) -> str:
    """``File "<this file>", line N, in name`` of the line of ``function`` holding ``text``."""
    lines, first = inspect.getsourcelines(function)
    number = first + next(i for i, line in enumerate(lines) if text in line)
    return f'File "{__file__}", line {number}, in {function.__name__}'


def _rows(seed: int = 0) -> torch.Tensor:
    x = torch.rand(30, 5, generator=torch.Generator().manual_seed(seed)) * 50
    x[:, 2:4] += x[:, :2]
    x[:, 4] /= 50
    return x


@pytest.mark.parametrize("mode", ["non_strict", "strict"])
def test_nodes_name_the_helpers_line(mode: str) -> None:
    settings = Settings(capture=CaptureSettings(mode=mode))
    captured = capture(CallsAHelper(postprocess), (_rows(),), settings=settings)
    flip = next(n for n in captured.graph_module.graph.nodes if str(n.target) == "aten.flip.default")
    assert call_site(flip) == _line(postprocess, "flip")
    mul = next(n for n in captured.graph_module.graph.nodes if str(n.target) == "aten.mul.Tensor")
    assert call_site(mul) == _line(CallsAHelper.forward, "x * 2")


def test_a_refusal_names_the_line_of_the_op_in_the_helper() -> None:
    with pytest.raises(PassError) as info:
        fxdeploy.lower(CallsAHelper(postprocess), (_rows(),))
    message = str(info.value)
    assert f"{_line(postprocess, 'flip')}: aten.flip.default orders or moves values" in message
    assert f"rows selected at {_line(postprocess, 'kept = x[')}" in message
    assert "in forward" not in message


def test_what_replaces_an_op_keeps_its_line() -> None:
    """pad_compactions puts a multiclass_nms (and its padding) where the nms was: a later error at
    any of them names the nms call, not fxdeploy's wrapper nor forward."""
    captured = capture(CallsAHelper(suppress), (_rows(),))
    gm, _ = run_pipeline(captured.graph_module, CLEANUP, Settings())
    known = set(gm.graph.nodes)
    gm = pad_compactions(gm, Settings()).graph_module
    multiclass = next(n for n in gm.graph.nodes if str(n.target) == "fxdeploy.multiclass_nms.default")
    assert call_site(multiclass) == _line(suppress, "nms(")
    inserted = [n for n in gm.graph.nodes if n not in known and n.op == "call_function"]
    assert len(inserted) > 10
    sites = {call_site(n) for n in inserted}
    assert sites <= {_line(suppress, "nms("), _line(suppress, "kept = x[")}, sites
