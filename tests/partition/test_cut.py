"""host_postprocess_split: NMS and what depends on it go to the host; the rest stays on the engine."""

from __future__ import annotations

import copy
import operator

import torch

import fxdeploy.ops  # noqa: F401  (defines torch.ops.fxdeploy.*)
from fxdeploy.partition import Source
from fxdeploy.partition.cut import SplitParts, host_postprocess_split, split_parts
from fxdeploy.passes import op_histogram
from fxdeploy.settings import Settings
from tests.passes.graphs import aten, build

NMS = "fxdeploy.multiclass_nms.default"


def detector_graph() -> torch.fx.GraphModule:
    """boxes/scores → NMS → rescale; a feature output that does not depend on NMS; a size both use."""

    def body(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> tuple[torch.fx.Node, ...]:
        boxes = g.call_function(aten.mul.Tensor, (xs[0], 2.0))
        scores = g.call_function(aten.sigmoid.default, (xs[1],))
        feature = g.call_function(aten.mean.dim, (xs[1], [1]))
        nms = g.call_function(torch.ops.fxdeploy.multiclass_nms.default,
                              (boxes, scores, 0.5, 0.05, 200, -1, 10, -1, False))
        det_boxes, det_scores, num = (g.call_function(operator.getitem, (nms, i)) for i in (0, 1, 3))
        scaled = g.call_function(aten.div.Tensor, (det_boxes, 2.0))
        size = g.call_function(aten.sym_size.int, (xs[0], 0))
        flat_head = g.call_function(aten.reshape.default, (boxes, [size, -1]))
        flat_tail = g.call_function(aten.reshape.default, (det_scores, [size, -1]))
        return scaled, flat_tail, num, feature, flat_head

    return build(body, 2, list(_inputs()))


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    corners = torch.rand(2, 30, 2, generator=generator) * 50
    boxes = torch.cat([corners, corners + 5 + torch.rand(2, 30, 2, generator=generator) * 20], -1)
    return boxes, torch.randn(2, 30, 3, generator=generator)


def split_matching_the_original(gm: torch.fx.GraphModule) -> SplitParts:
    """Split ``gm``; the split graph must give the unsplit graph's outputs, value for value."""
    reference = copy.deepcopy(gm)
    split = host_postprocess_split(gm, Settings()).graph_module
    parts = split_parts(split)
    assert parts is not None
    inputs = _inputs()
    for got, want in zip(split(*inputs), reference(*inputs), strict=True):
        assert torch.equal(got, want)
    return parts


def head_outputs(parts: SplitParts) -> list[torch.fx.Node]:
    return list(next(n for n in parts.head.graph.nodes if n.op == "output").args[0])


def test_nms_and_its_consumers_move_to_the_host_tail() -> None:
    gm = detector_graph()
    reference = copy.deepcopy(gm)
    result = host_postprocess_split(gm, Settings())
    assert result.modified
    split = result.graph_module
    split.graph.lint()
    split.recompile()
    parts = split_parts(split)
    assert parts is not None
    head, tail = op_histogram(parts.head), op_histogram(parts.tail)
    assert NMS not in head
    assert {"aten.mul.Tensor", "aten.sigmoid.default", "aten.mean.dim", "aten.reshape.default"} <= set(head)
    assert tail[NMS] == 1 and tail["aten.div.Tensor"] == 1 and tail["aten.reshape.default"] == 1
    inputs = _inputs()
    for got, want in zip(split(*inputs), reference(*inputs), strict=True):
        assert torch.equal(got, want)


def test_the_engine_gets_and_returns_tensors_only() -> None:
    parts = split_parts(host_postprocess_split(detector_graph(), Settings()).graph_module)
    assert parts is not None
    head_output = next(n for n in parts.head.graph.nodes if n.op == "output")
    assert all(isinstance(n.meta["val"], torch.Tensor) for n in head_output.args[0])
    # The batch size both halves need is recomputed on the host, not exported from the engine.
    assert op_histogram(parts.tail)["aten.sym_size.int"] == 1
    assert [stage.kind for stage in parts.stages] == ["engine", "host"]
    assert parts.stages[0].inputs == [Source.graph_input(0), Source.graph_input(1)]
    assert parts.stages[1].inputs == [Source(0, 0), Source(0, 1), Source.graph_input(0)]
    assert parts.outputs == [Source(1, 0), Source(1, 1), Source(1, 2), Source(0, 2), Source(0, 3)]


def test_graph_without_nms_is_not_modified() -> None:
    gm = build(lambda g, xs: (g.call_function(aten.relu.default, (xs[0],)),), 1, [torch.randn(2, 3)])
    result = host_postprocess_split(gm, Settings())
    assert not result.modified and split_parts(result.graph_module) is None


def test_splitting_twice_is_a_no_op() -> None:
    once = host_postprocess_split(detector_graph(), Settings()).graph_module
    assert not host_postprocess_split(once, Settings()).modified


def keep_mask_graph() -> torch.fx.GraphModule:
    """A DETR-style head: a keep mask as NMS scores, labels gathered after NMS by its index."""

    def body(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> tuple[torch.fx.Node, ...]:
        boxes = g.call_function(aten.unsqueeze.default, (g.call_function(aten.mul.Tensor, (xs[0], 2.0)), 2))
        probs = g.call_function(aten.softmax.int, (xs[1], -1))
        best = g.call_function(aten.amax.default, (probs, [-1]))
        labels = g.call_function(aten.argmax.default, (probs, -1))
        keep = g.call_function(aten.gt.Scalar, (best, 0.4))
        mask = g.call_function(aten.unsqueeze.default, (g.call_function(aten.to.dtype, (keep, torch.float32)), -1))
        nms = g.call_function(torch.ops.fxdeploy.multiclass_nms.default, (boxes, mask, 1.0, 0.5, 30, -1, 30, -1, False))
        index, num = (g.call_function(operator.getitem, (nms, i)) for i in (4, 3))
        rows = g.call_function(aten.clamp.default, (index, 0))
        return (g.call_function(aten.gather.default, (labels, 1, rows)),
                g.call_function(aten.gather.default, (best, 1, rows)), num)

    return build(body, 2, list(_inputs()))


def test_host_only_ops_feeding_the_tail_move_with_it() -> None:
    """ncnn has no comparison, cast or per-axis argmax layer: where they feed only the tail they run
    on the host; a view of engine compute (the boxes' unsqueeze) and the shared amax stay in the engine."""
    parts = split_matching_the_original(keep_mask_graph())
    head, tail = op_histogram(parts.head), op_histogram(parts.tail)
    moved = {"aten.gt.Scalar", "aten.to.dtype", "aten.argmax.default"}
    assert moved <= set(tail) and not moved & set(head), (head, tail)
    assert tail["aten.unsqueeze.default"] == 1 and head["aten.unsqueeze.default"] == 1
    assert {"aten.softmax.int", "aten.amax.default", "aten.mul.Tensor"} <= set(head)


def scaled_detections_graph(make_scale: str) -> torch.fx.GraphModule:
    """NMS detections times a value made without the inputs: a ratio of two constants, a random
    draw, or a constant filled in place."""

    def body(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> tuple[torch.fx.Node, ...]:
        scores = g.call_function(aten.sigmoid.default, (xs[1],))
        nms = g.call_function(torch.ops.fxdeploy.multiclass_nms.default,
                              (xs[0], scores, 0.5, 0.05, 200, -1, 10, -1, False))
        det_boxes, num = (g.call_function(operator.getitem, (nms, i)) for i in (0, 3))
        if make_scale == "ratio":
            scale = g.call_function(aten.div.Tensor, (g.call_function(aten.scalar_tensor.default, (64.0,)),
                                                      g.call_function(aten.scalar_tensor.default, (32.0,))))
        elif make_scale == "random":
            scale = g.call_function(aten.rand.default, ([],), {"dtype": torch.float32})
        else:
            scale = g.call_function(aten.fill_.Scalar, (g.call_function(aten.zeros.default, ([],)), 2.0))
        return g.call_function(aten.mul.Tensor, (det_boxes, scale)), num

    return build(body, 2, list(_inputs()))


def test_a_value_made_without_the_inputs_is_recomputed_in_the_tail() -> None:
    """ncnn's engine outputs are per image; a 0-d ratio (or anchors) has no batch to hand over."""
    parts = split_matching_the_original(scaled_detections_graph("ratio"))
    assert "aten.div.Tensor" in op_histogram(parts.tail) and "aten.div.Tensor" not in op_histogram(parts.head)
    assert [n.target for n in head_outputs(parts)] == [aten.sigmoid.default]


def test_random_or_mutated_values_are_not_recomputed() -> None:
    """A random draw would be drawn again on the host, and an in-place fill is not a pure value:
    both stay engine outputs (which the ncnn lowering then refuses, naming the shape)."""
    for make_scale, op in (("random", "aten.rand.default"), ("in_place", "aten.fill_.Scalar")):
        split = host_postprocess_split(scaled_detections_graph(make_scale), Settings()).graph_module
        parts = split_parts(split)
        assert parts is not None
        assert op in op_histogram(parts.head) and op not in op_histogram(parts.tail), make_scale


def per_level_selection_graph() -> torch.fx.GraphModule:
    """RetinaNet-style scores: per level, the scores below the level's k-th best zeroed, then the
    levels joined; every op of it feeds only the NMS."""

    def body(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> tuple[torch.fx.Node, ...]:
        levels = []
        for start, end in ((0, 10), (10, 30)):
            level = g.call_function(aten.sigmoid.default, (g.call_function(aten.slice.Tensor, (xs[1], 1, start, end)),))
            flat = g.call_function(aten.flatten.using_ints, (level, 1))
            top = g.call_function(aten.topk.default, (flat, 5, 1))
            kth = g.call_function(aten.slice.Tensor, (g.call_function(operator.getitem, (top, 0)), 1, -1))
            keep = g.call_function(aten.ge.Tensor, (flat, kth))
            kept = g.call_function(aten.where.self, (keep, flat, g.call_function(aten.zeros_like.default, (flat,))))
            levels.append(g.call_function(aten.view_as.default, (kept, level)))
        scores = g.call_function(aten.cat.default, (levels, 1))
        nms = g.call_function(torch.ops.fxdeploy.multiclass_nms.default,
                              (xs[0], scores, 0.5, 0.05, 200, -1, 10, -1, False))
        return tuple(g.call_function(operator.getitem, (nms, i)) for i in range(4))

    return build(body, 2, list(_inputs()))


def test_a_per_level_candidate_selection_moves_to_the_host() -> None:
    """ncnn has no TopK: the selection runs on the host, the engine hands over each level's scores
    (in the view the selection reads them through)."""
    parts = split_matching_the_original(per_level_selection_graph())
    head, tail = op_histogram(parts.head), op_histogram(parts.tail)
    moved = {"aten.topk.default", "aten.ge.Tensor", "aten.where.self", "aten.zeros_like.default",
             "aten.view_as.default", "aten.cat.default"}
    assert moved <= set(tail) and not moved & set(head), (head, tail)
    # the flatten is a view of engine compute with no moved op behind it: it stays in the engine;
    # view_as reads its level's shape, so the level goes over too
    levels = sorted(str(n.target) for n in head_outputs(parts))
    assert levels == ["aten.flatten.using_ints"] * 2 + ["aten.sigmoid.default"] * 2


def test_writes_into_host_rows_stay_on_the_host() -> None:
    """Ultralytics' xywh2xyxy on the rows a top-k selected: an empty_like buffer, written column by
    column (functional, as passes see it: a copy into a slice, and a slice_scatter back), then a
    split of the columns, all before the NMS. An engine stage there would take rows as its batch;
    the host keeps them, and the split graph computes what the original does."""

    def body(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> tuple[torch.fx.Node, ...]:
        call = g.call_function
        rows = call(aten.cat.default, ([call(aten.mul.Tensor, (xs[0], 2.0)), xs[1]], -1))  # engine: [B, 30, 7]
        index = call(operator.getitem, (call(aten.topk.default, (call(aten.select.int, (xs[1], 2, 0)), 20)), 1))
        picked = call(aten.gather.default, (rows, 1, call(aten.expand.default, (
            call(aten.unsqueeze.default, (index, -1)), [2, 20, 7]))))
        xyxy = call(aten.empty_like.default, (picked,))
        half = call(aten.div.Tensor, (call(aten.slice.Tensor, (picked, 2, 2, 4)), 2.0))
        centers = call(aten.slice.Tensor, (picked, 2, 0, 2))
        for start, end, value in ((0, 2, call(aten.sub.Tensor, (centers, half))),
                                  (2, 4, call(aten.add.Tensor, (centers, half))),
                                  (4, 7, call(aten.slice.Tensor, (picked, 2, 4, 7)))):
            copied = call(aten.copy.default, (call(aten.slice.Tensor, (xyxy, 2, start, end)), value))
            xyxy = call(aten.slice_scatter.default, (xyxy, copied, 2, start, end))
        columns = call(aten.split_with_sizes.default, (xyxy, [4, 3], 2))
        boxes, scores = (call(operator.getitem, (columns, i)) for i in (0, 1))
        nms = call(torch.ops.fxdeploy.multiclass_nms.default, (boxes, scores, 0.5, 0.05, 20, -1, 10, -1, False))
        return tuple(call(operator.getitem, (nms, i)) for i in (0, 1, 3))

    parts = split_matching_the_original(build(body, 2, list(_inputs())))
    assert [s.kind for s in parts.stages] == ["engine", "host"]
    tail = op_histogram(parts.tail)
    assert tail["aten.copy.default"] == 3 and tail["aten.slice_scatter.default"] == 3
    assert tail["aten.empty_like.default"] == 1
    assert tail["aten.split_with_sizes.default"] == 1 and tail[NMS] == 1


def test_functional_writes_into_host_rows_stay_on_the_host() -> None:
    """YOLOv5's xywh2xyxy as a functional graph holds it: a clone of the selected rows, then a
    ``copy`` and a ``select_scatter`` per column. Left on an engine between the host's selection and
    its NMS, that stage would take the rows as its batch; the host keeps them."""

    def body(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> tuple[torch.fx.Node, ...]:
        call = g.call_function
        rows = call(aten.cat.default, ([call(aten.mul.Tensor, (xs[0], 2.0)), xs[1]], -1))  # engine: [B, 30, 7]
        index = call(operator.getitem, (call(aten.topk.default, (call(aten.select.int, (xs[1], 2, 0)), 20)), 1))
        picked = call(aten.gather.default, (rows, 1, call(aten.expand.default, (
            call(aten.unsqueeze.default, (index, -1)), [2, 20, 7]))))
        xyxy = call(aten.clone.default, (picked,))
        for column, (centre, side, op) in enumerate(((0, 2, aten.sub), (1, 3, aten.sub), (0, 2, aten.add))):
            half = call(aten.div.Tensor, (call(aten.select.int, (picked, 2, side)), 2.0))
            value = call(op.Tensor, (call(aten.select.int, (picked, 2, centre)), half))
            written = call(aten.copy.default, (call(aten.select.int, (xyxy, 2, column)), value))
            xyxy = call(aten.select_scatter.default, (xyxy, written, 2, column))
        boxes = call(aten.slice.Tensor, (xyxy, 2, 0, 4))
        scores = call(aten.slice.Tensor, (xyxy, 2, 4, 7))
        nms = call(torch.ops.fxdeploy.multiclass_nms.default, (boxes, scores, 0.5, 0.05, 20, -1, 10, -1, False))
        return tuple(call(operator.getitem, (nms, i)) for i in (0, 1, 3))

    parts = split_matching_the_original(build(body, 2, list(_inputs())))
    assert [s.kind for s in parts.stages] == ["engine", "host"]
    tail = op_histogram(parts.tail)
    assert tail["aten.select_scatter.default"] == 3 and tail["aten.copy.default"] == 3 and tail[NMS] == 1


def fast_nms_graph() -> torch.fx.GraphModule:
    """YOLOv8-OBB's fast NMS: the rows sorted by score (a host sort), their pairwise matrix, its upper
    triangle (``triu_(diagonal=1)``), the column max against the threshold."""

    def body(g: torch.fx.Graph, xs: list[torch.fx.Node]) -> tuple[torch.fx.Node, ...]:
        scores = g.call_function(aten.amax.default, (g.call_function(aten.sigmoid.default, (xs[1],)), [-1]))
        order = g.call_function(operator.getitem, (g.call_function(aten.sort.default, (scores, 1, True)), 1))
        x = g.call_function(aten.gather.default, (g.call_function(aten.select.int, (xs[0], 2, 0)), 1, order))
        pairs = g.call_function(aten.sub.Tensor, (g.call_function(aten.unsqueeze.default, (x, 2)),
                                                  g.call_function(aten.unsqueeze.default, (x, 1))))
        upper = g.call_function(aten.triu.default, (g.call_function(aten.abs.default, (pairs,)), 1))
        worst = g.call_function(aten.amax.default, (upper, [1]))
        return (g.call_function(aten.lt.Scalar, (worst, 5.0)),)

    return build(body, 2, list(_inputs()))


def test_a_triangle_of_host_values_stays_on_the_host() -> None:
    """triu zeroes by position alone, like an elementwise op: computed from host rows for host ops
    only, it runs on the host with the matrix it reads, rather than an engine stage after the sort
    handing an [n, n] matrix over (which has no batch first)."""
    parts = split_matching_the_original(fast_nms_graph())
    assert [stage.kind for stage in parts.stages] == ["engine", "host"]
    head, tail = op_histogram(parts.head), op_histogram(parts.tail)
    moved = {"aten.triu.default", "aten.abs.default", "aten.sub.Tensor", "aten.gather.default"}
    assert moved <= set(tail) and not moved & set(head), (head, tail)
    assert head == {"aten.sigmoid.default": 1, "aten.amax.default": 1}, head
    assert tail["aten.select.int"] == 1  # a view of an input: the host views the input itself
