"""precision_policy: fp16/bf16 network, fp32 scores, box decoding and NMS; inputs and outputs unchanged."""

from __future__ import annotations

import pytest
import torch

from examples import detector
from fxdeploy.capture import capture
from fxdeploy.capture.substitution import resolve
from fxdeploy.passes import op_histogram, run_pipeline
from fxdeploy.passes.padding import pad_compactions
from fxdeploy.passes.pipelines import CLEANUP
from fxdeploy.passes.precision_policy import precision_policy
from fxdeploy.passes.record import record, update
from fxdeploy.settings import Settings

HALVES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def _detector_graph() -> tuple[torch.fx.GraphModule, torch.Tensor, torch.nn.Module]:
    model, (x,) = detector.tiny_yolo()
    captured = capture(model, (x,), substitutions=resolve(None))
    gm = captured.graph_module
    update(gm, output_names=tuple(captured.output_names))
    gm, _ = run_pipeline(gm, (*CLEANUP, pad_compactions), Settings())
    return gm, x, model


def _input_dtypes(gm: torch.fx.GraphModule, target: str) -> list[torch.dtype]:
    node = next(n for n in gm.graph.nodes if str(n.target) == target)
    return [a.meta["val"].dtype for a in node.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor)]


@pytest.mark.parametrize("precision", sorted(HALVES))
def test_convolutions_reduced_scores_and_nms_fp32(precision: str) -> None:
    half = HALVES[precision]
    gm, x, model = _detector_graph()
    before = op_histogram(gm)
    result = precision_policy(gm, Settings(precision=precision))
    gm = result.graph_module
    gm.graph.lint()
    assert result.modified
    convs = [n for n in gm.graph.nodes if "conv" in str(n.target)]
    assert convs and all(n.meta["val"].dtype == half for n in convs)
    weights = [n for n in gm.graph.nodes if n.op == "get_attr" and any(u in convs for u in n.users)]
    assert weights and all(n.meta["val"].dtype == half for n in weights)  # stored reduced, not cast per call
    assert _input_dtypes(gm, "fxdeploy.multiclass_nms.default") == [torch.float32, torch.float32]
    assert all(n.meta["val"].dtype == torch.float32 for n in gm.graph.nodes if str(n.target) == "aten.sigmoid.default")
    after = op_histogram(gm)
    assert after.get("aten._to_copy.default", 0) > before.get("aten._to_copy.default", 0)  # boundary casts
    precision_record = record(gm).precision
    assert precision_record["policy"] == precision
    assert precision_record["fp32_ops"]["fxdeploy.multiclass_nms.default"] == len(x)  # one per image
    assert precision_record[f"{precision}_ops"] > len(convs)
    placeholder = next(n for n in gm.graph.nodes if n.op == "placeholder")
    assert placeholder.meta["val"].dtype == torch.float32  # callers still feed fp32
    with torch.no_grad():
        outputs = dict(zip(record(gm).output_names, gm(x), strict=True))
        want = model(x)  # the model itself, per image: its own loop, filter and NMS
    for image, result in enumerate(want):
        scores = outputs[f"{image}.scores"]
        assert scores.dtype == torch.float32 and outputs[f"{image}.boxes"].dtype == torch.float32
        scores = scores[: int(outputs[record(gm).trim[f"{image}.scores"].count])]
        # reduced precision may swap near-equal scores, or move one across the threshold: compare
        # the clear scores as sorted sets
        assert _clear_scores(scores, model).shape == _clear_scores(result["scores"], model).shape
        assert (_clear_scores(scores, model) - _clear_scores(result["scores"], model)).abs().max().item() < 2e-2


def _clear_scores(scores: torch.Tensor, model: torch.nn.Module) -> torch.Tensor:
    kept = scores[scores > abs(model.conf_threshold) + 2e-2]
    assert kept.numel() > 3
    return kept.sort(descending=True).values


def test_fp32_setting_is_not_modified() -> None:
    gm, _, _ = _detector_graph()
    assert not precision_policy(gm, Settings()).modified


class GridIntoLinear(torch.nn.Module):
    """``arange(n).float()`` (an ``aten.to.dtype`` node) added to the input, then a linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(12, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x + torch.arange(12).float() * 0.5)


@pytest.mark.parametrize("precision", sorted(HALVES))
def test_a_float_cast_of_integers_is_cast_again_where_the_network_is_reduced(precision: str) -> None:
    model, x = GridIntoLinear().eval(), torch.randn(2, 12)
    gm = capture(model, (x,)).graph_module
    assert "aten.to.dtype" in op_histogram(gm)
    gm = precision_policy(gm, Settings(precision=precision)).graph_module
    gm.recompile()
    linear = next(n for n in gm.graph.nodes if str(n.target) == "aten.linear.default")
    assert _input_dtypes(gm, "aten.linear.default") == [HALVES[precision]] * 3 and linear.meta["val"].dtype != x.dtype
    with torch.no_grad():
        got, want = gm(x)[0], model(x)
    assert got.dtype == torch.float32 and (got - want).abs().max().item() < 2e-2
