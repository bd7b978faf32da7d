"""The fxdeploy:: custom ops as graph nodes: schema and fake kernels, export, dynamic batch."""

from __future__ import annotations

import torch

import fxdeploy.ops as ops


def _inputs(batch: int = 2, num_boxes: int = 6, num_classes: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    boxes = torch.rand(batch, num_boxes, 4) * 10
    boxes[..., 2:] += boxes[..., :2]
    return boxes, torch.rand(batch, num_boxes, num_classes)


def test_ops_pass_opcheck() -> None:
    boxes, scores = _inputs()
    args = (boxes, scores, 0.5, 0.05, 4, -1, 5, -1, False)
    torch.library.opcheck(torch.ops.fxdeploy.multiclass_nms.default, args)
    torch.library.opcheck(torch.ops.fxdeploy.nms.default, (boxes[0], scores[0, :, 0], 0.5))
    idxs = torch.tensor([0, 1, 0, 1, 2, 2])
    torch.library.opcheck(torch.ops.fxdeploy.batched_nms.default, (boxes[0], scores[0, :, 0], idxs, 0.5))


class _Detector(torch.nn.Module):
    def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return ops.multiclass_nms(boxes, scores, keep_top_k=7, pre_top_k=4, output_index=True)


def test_strict_export_keeps_one_node_with_static_shapes_and_dynamic_batch() -> None:
    boxes, scores = _inputs()
    batch = torch.export.Dim("batch", min=1, max=32)
    ep = torch.export.export(_Detector(), (boxes, scores), dynamic_shapes=({0: batch}, {0: batch}), strict=True)
    nodes = [n for n in ep.graph.nodes if n.op == "call_function" and "fxdeploy" in str(n.target)]
    assert [n.target for n in nodes] == [torch.ops.fxdeploy.multiclass_nms.default]
    shapes = [tuple(str(d) for d in v.shape) for v in nodes[0].meta["val"]]
    symbol = shapes[0][0]
    assert not symbol.isdigit()
    assert shapes == [(symbol, "7", "4"), (symbol, "7"), (symbol, "7"), (symbol,), (symbol, "7")]
    boxes3, scores3 = _inputs(batch=3)
    got = ep.module()(boxes3, scores3)
    want = _Detector()(boxes3, scores3)
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


class _Filter(torch.nn.Module):
    def forward(self, boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor) -> torch.Tensor:
        keep = ops.batched_nms(boxes, scores, idxs, 0.5)
        return boxes[keep]


def test_data_dependent_ops_export_with_an_unbacked_size() -> None:
    boxes, scores = _inputs(batch=1)
    idxs = torch.tensor([0, 1, 0, 1, 2, 2])
    args = (boxes[0], scores[0, :, 0], idxs)
    ep = torch.export.export(_Filter(), args, strict=True)
    node = next(n for n in ep.graph.nodes if n.target == torch.ops.fxdeploy.batched_nms.default)
    size = node.meta["val"].shape[0]
    assert isinstance(size, torch.SymInt) and str(size).startswith("u")
    assert torch.equal(ep.module()(*args), _Filter()(*args))
