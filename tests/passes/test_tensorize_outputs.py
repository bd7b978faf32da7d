from __future__ import annotations

import torch

from fxdeploy.passes import op_histogram
from fxdeploy.passes.record import Trim, record, update
from fxdeploy.passes.tensorize_outputs import tensorize_outputs
from fxdeploy.settings import Settings
from tests.passes.graphs import aten, build


def test_constants_leave_the_graph_and_symints_become_tensors() -> None:
    def body(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> tuple[object, ...]:
        relu = g.call_function(aten.relu.default, (xs[0],))
        size = g.call_function(aten.sym_size.int, (xs[0], 0))
        return relu, None, 3, size

    gm = build(body, 1, [torch.randn(4, 2)])
    update(gm, output_names=("y", "none", "three", "n"))
    result = tensorize_outputs(gm, Settings())
    gm = result.graph_module
    gm.graph.lint()
    gm.recompile()
    assert result.modified
    assert op_histogram(gm)["aten.scalar_tensor.default"] == 1
    assert list(record(gm).output_leaves) == [
        {"kind": "tensor", "name": "y"},
        {"kind": "constant", "name": "none", "value": None},
        {"kind": "constant", "name": "three", "value": 3},
        {"kind": "scalar", "name": "n", "type": "int"},
    ]
    x = torch.randn(4, 2)
    y, n = gm(x)
    assert torch.equal(y, x.relu()) and n.dtype == torch.int64 and int(n) == 4


def test_all_tensor_outputs_are_not_modified() -> None:
    gm = build(lambda g, xs: (g.call_function(aten.relu.default, (xs[0],)),), 1, [torch.randn(2)])
    result = tensorize_outputs(gm, Settings())
    assert not result.modified
    assert list(record(result.graph_module).output_leaves) == [{"kind": "tensor", "name": "output_0"}]


def test_detection_leaves_record_the_dim_of_their_rows() -> None:
    """A batched NMS output keeps its rows in dim 1; one image's slice of it, in dim 0."""
    from fxdeploy import ops

    class Model(torch.nn.Module):
        def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, ...]:
            det_boxes, det_scores, _, _ = ops.multiclass_nms(boxes, scores, keep_top_k=5)
            return det_boxes, det_boxes[0], det_scores[1], scores

    inputs = (torch.rand(2, 7, 4), torch.rand(2, 7, 3))
    gm = torch.export.export(Model(), inputs).module()
    update(gm, output_names=("batched", "image0_boxes", "image1_scores", "plain"))
    leaves = list(record(tensorize_outputs(gm, Settings()).graph_module).output_leaves)
    assert [(leaf.get("detections", False), leaf.get("rows_dim")) for leaf in leaves] == [
        (True, 1), (True, 0), (True, 0), (False, None)
    ]


def test_after_two_nms_calls_rows_follow_the_last() -> None:
    """A two-stage detector: proposals (K=6) feed the final NMS (K=4), whose rows the outputs hold."""
    from fxdeploy import ops

    class Model(torch.nn.Module):
        def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, ...]:
            proposals, objectness, _, _ = ops.multiclass_nms(boxes, scores[..., :1], keep_top_k=6)
            rescored = objectness.unsqueeze(-1) * scores[:, :6]
            det_boxes, _, _, _ = ops.multiclass_nms(proposals, rescored, keep_top_k=4)
            return det_boxes[0], proposals

    gm = torch.export.export(Model(), (torch.rand(2, 7, 4), torch.rand(2, 7, 3))).module()
    update(gm, output_names=("boxes", "proposals"))
    leaves = list(record(tensorize_outputs(gm, Settings()).graph_module).output_leaves)
    assert [leaf.get("rows_dim") for leaf in leaves] == [0, 1]


def test_rows_joined_from_several_nms_calls_take_the_trimmed_dim() -> None:
    """SSD's per-class loop: each class's kept rows (K=5) joined by a ``cat`` (10 rows), which the
    padding pass trims along dim 0. No dim has the NMS's K, yet the rows are still NMS rows: the
    leaf must say so (the check compares them as a set, ties excused), at the trimmed dim; the same
    join left untrimmed names no dim, and is compared element by element."""
    from fxdeploy import ops

    class Model(torch.nn.Module):
        def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, ...]:
            kept = [ops.multiclass_nms(boxes, scores[..., c : c + 1], keep_top_k=5)[0][0] for c in range(2)]
            joined = torch.cat(kept)
            return joined, joined + 1

    gm = torch.export.export(Model(), (torch.rand(1, 7, 4), torch.rand(1, 7, 2))).module()
    update(gm, output_names=("boxes", "untrimmed", "count"), hidden=("count",), trim={"boxes": Trim(0, "count")})
    output = next(n for n in gm.graph.nodes if n.op == "output")
    with gm.graph.inserting_before(output):
        count = gm.graph.call_function(aten.scalar_tensor.default, (10,), {"dtype": torch.int64})
    count.meta["val"] = torch.tensor(10)
    output.args = ((*output.args[0], count),)
    leaves = list(record(tensorize_outputs(gm, Settings()).graph_module).output_leaves)
    assert [(leaf.get("rows"), leaf.get("rows_dim"), leaf.get("iou_threshold")) for leaf in leaves] == [
        ("nms", 0, 0.5), (None, None, None), (None, None, None)
    ]
