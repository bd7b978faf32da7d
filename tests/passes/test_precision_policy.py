"""precision_policy: fp16 network, fp32 scores, box decoding and NMS; inputs and outputs unchanged."""

from __future__ import annotations

import torch

from examples import detector
from fxdeploy.capture import capture
from fxdeploy.passes import op_histogram, run_pipeline
from fxdeploy.passes.pipelines import CLEANUP
from fxdeploy.passes.precision_policy import PRECISION, precision_policy
from fxdeploy.passes.substitute_nms import substitute_nms
from fxdeploy.settings import Settings
from fxdeploy.substitution import resolve

FP16 = Settings(precision="fp16")


def _detector_graph() -> tuple[torch.fx.GraphModule, torch.Tensor, torch.nn.Module]:
    model, (x,) = detector.tiny_yolo()
    captured = capture(model, (x,), substitutions=resolve(detector.FXDEPLOY_SUBSTITUTIONS))
    gm, _ = run_pipeline(captured.graph_module, (*CLEANUP, substitute_nms), Settings())
    return gm, x, model


def _input_dtypes(gm: torch.fx.GraphModule, target: str) -> list[torch.dtype]:
    node = next(n for n in gm.graph.nodes if str(n.target) == target)
    return [a.meta["val"].dtype for a in node.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor)]


def test_convolutions_fp16_scores_and_nms_fp32() -> None:
    gm, x, model = _detector_graph()
    before = op_histogram(gm)
    result = precision_policy(gm, FP16)
    gm = result.graph_module
    gm.graph.lint()
    assert result.modified
    convs = [n for n in gm.graph.nodes if "conv" in str(n.target)]
    assert convs and all(n.meta["val"].dtype == torch.float16 for n in convs)
    assert _input_dtypes(gm, "fxdeploy.multiclass_nms.default") == [torch.float32, torch.float32]
    assert all(n.meta["val"].dtype == torch.float32 for n in gm.graph.nodes if str(n.target) == "aten.sigmoid.default")
    after = op_histogram(gm)
    assert after.get("aten._to_copy.default", 0) > before.get("aten._to_copy.default", 0)  # boundary casts
    record = gm.meta[PRECISION]
    assert record["policy"] == "fp16" and record["fp32_ops"]["fxdeploy.multiclass_nms.default"] == 1
    placeholder = next(n for n in gm.graph.nodes if n.op == "placeholder")
    assert placeholder.meta["val"].dtype == torch.float32  # callers still feed fp32
    with torch.no_grad():
        boxes, scores, labels, counts = gm(x)
        want = detector.tensor_only_postprocess(model, *model.decode(x))
    assert boxes.dtype == torch.float32 and scores.dtype == torch.float32
    assert (scores - want[1]).abs().max().item() < 2e-2


def test_fp32_setting_is_not_modified() -> None:
    gm, _, _ = _detector_graph()
    assert not precision_policy(gm, Settings()).modified
