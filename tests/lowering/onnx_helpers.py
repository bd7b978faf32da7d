"""Export a tiny module that calls fxdeploy.ops.multiclass_nms to ONNX, and run it.

The path is the one lowering uses: strict torch.export, then torch.onnx's dynamo exporter with
fxdeploy's translation table. The model is written at IR 10 because onnxruntime 1.31 reads at
most IR 13 while onnx 1.23 writes 14.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import torch

import fxdeploy.ops
from fxdeploy.lowering.onnx_translations import translation_table

OUTPUT_NAMES = ["det_boxes", "det_scores", "det_labels", "num_dets", "det_index"]


class MulticlassNMS(torch.nn.Module):
    """Calls the public wrapper with fixed keyword arguments; returns all five outputs."""

    def __init__(self, **nms_kwargs: Any) -> None:
        super().__init__()
        self.nms_kwargs = dict(nms_kwargs, output_index=True)

    def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return fxdeploy.ops.multiclass_nms(boxes, scores, **self.nms_kwargs)


def example_inputs(
    batch: int, num_boxes: int, num_classes: int, *, per_class_boxes: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random corner boxes (x1 < x2, y1 < y2) in a 100x100 image and uniform scores."""
    lead = (batch, num_boxes, num_classes) if per_class_boxes else (batch, num_boxes)
    centre = torch.rand(*lead, 2) * 100
    half = torch.rand(*lead, 2) * 20 + 0.5
    return torch.cat([centre - half, centre + half], -1), torch.rand(batch, num_boxes, num_classes)


def export_multiclass_nms(
    num_classes: int,
    *,
    per_class_boxes: bool = False,
    flavour: str = "standard",
    dtype: torch.dtype = torch.float32,
    static_boxes: int | None = None,
    **nms_kwargs: Any,
) -> onnx.ModelProto:
    """Export with symbolic batch and box dims, so one model serves every B and N (or static at
    B = 2 and N = ``static_boxes`` where given, as in a per-image detector after padding).

    The example has B = 2 and N = 8: torch.export specializes dims whose example size is 0 or 1.
    """
    module = MulticlassNMS(**nms_kwargs)
    inputs = example_inputs(2, static_boxes or 8, num_classes, per_class_boxes=per_class_boxes)
    args = tuple(t.to(dtype) for t in inputs)
    batch = torch.export.Dim("batch", min=1, max=64)
    num = torch.export.Dim("num_boxes", min=2, max=100_000)
    shapes = ({0: batch, 1: num}, {0: batch, 1: num}) if static_boxes is None else None
    ep = torch.export.export(module, args, dynamic_shapes=shapes, strict=True)
    program = torch.onnx.export(
        ep,
        args,
        dynamo=True,
        input_names=["boxes", "scores"],
        output_names=OUTPUT_NAMES,
        custom_translation_table=translation_table(flavour),
        optimize=True,
        verbose=False,
    )
    model = program.model_proto
    model.ir_version = 10
    return model


@functools.cache
def _cached_model(
    num_classes: int, per_class_boxes: bool, flavour: str, static_boxes: int | None, items: tuple
) -> bytes:
    model = export_multiclass_nms(
        num_classes, per_class_boxes=per_class_boxes, flavour=flavour, static_boxes=static_boxes, **dict(items)
    )
    return model.SerializeToString()


def cached_model(
    num_classes: int, *, per_class_boxes: bool = False, flavour: str = "standard",
    static_boxes: int | None = None, **nms_kwargs: Any,
) -> onnx.ModelProto:
    """export_multiclass_nms, exported once per distinct argument set in a test session."""
    items = tuple(sorted(nms_kwargs.items()))
    data = _cached_model(num_classes, per_class_boxes, flavour, static_boxes, items)
    return onnx.load_from_string(data)


def op_histogram(model: onnx.ModelProto) -> collections.Counter[str]:
    return collections.Counter(node.op_type for node in model.graph.node)


def ort_session(model: onnx.ModelProto) -> Any:
    """A 2-thread CPU session without spin-waiting: on a shared 2-core machine a spinning idle
    worker takes the core that a single-threaded kernel such as NonMaxSuppression runs on."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def run_ort(session: Any, boxes: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, ...]:
    feeds = {"boxes": boxes.numpy(), "scores": scores.numpy()}
    return tuple(torch.from_numpy(np.asarray(o)) for o in session.run(OUTPUT_NAMES, feeds))


def openvino_model(model: onnx.ModelProto) -> Any:
    import openvino as ov  # optional runtime: imported only here

    from fxdeploy.runtime.openvino import read_model

    core = ov.Core()
    compiled = core.compile_model(read_model(core, model.SerializeToString()), "CPU", {"INFERENCE_NUM_THREADS": 2})
    return compiled


def run_openvino(compiled: Any, boxes: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, ...]:
    result = compiled({"boxes": boxes.numpy(), "scores": scores.numpy()})
    by_name = {out.get_any_name(): result[out] for out in compiled.outputs}
    return tuple(torch.from_numpy(np.asarray(by_name[name])) for name in OUTPUT_NAMES)


def reference(boxes: torch.Tensor, scores: torch.Tensor, **nms_kwargs: Any) -> Sequence[torch.Tensor]:
    return fxdeploy.ops.multiclass_nms(boxes, scores, output_index=True, **nms_kwargs)
