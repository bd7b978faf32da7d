"""fxdeploy.capture.vectorize's rules, op by op: a graph captured for one image, vectorized over a
dynamic batch, must give each image what the per-image graph gives it, at batch 1 and 5."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from fxdeploy.capture import capture
from fxdeploy.capture.vectorize import Unbatchable, vectorize
from fxdeploy.ops import multiclass_nms


class Fn(nn.Module):
    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


def _copy_into_buffer(x: torch.Tensor) -> torch.Tensor:
    buffer = torch.zeros(1, 3, 8)
    buffer[:, :, :5].copy_(x)  # functionalized: copy and slice_scatter of an image-free buffer
    return buffer


def _nms(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    corners = x[..., :2].abs() * 10
    boxes = torch.cat([corners, corners + 5 + x[..., 2:4].abs()], -1)  # [1, 3, 4]
    return multiclass_nms(boxes, x[..., 4:].sigmoid().expand(1, 3, 2), iou_threshold=0.5, score_threshold=0.1,
                          keep_top_k=4)


def _rows_by_order(x: torch.Tensor) -> torch.Tensor:
    """Ultralytics' ``x[x[:, 4].argsort(descending=True)]``: an image's rows in its own order."""
    order = x[0, :, 0].argsort(descending=True)
    return x[0].index_select(0, torch.cat([order, order[:1]])).unsqueeze(0)


def test_whole_rows_are_one_flat_index_select_not_a_broadcast_gather() -> None:
    gm = capture(Fn(_rows_by_order), (torch.randn(1, 3, 5),)).graph_module
    batched, _ = vectorize(gm, [torch.randn(2, 3, 5)], [{0: torch.export.Dim("batch", min=1, max=8)}])
    targets = {n.target for n in batched.graph.nodes if n.op == "call_function"}
    assert torch.ops.aten.index_select.default in targets and torch.ops.aten.gather.default not in targets


def _attention(x: torch.Tensor) -> torch.Tensor:
    heads = x.reshape(1, 3, 5, 1).expand(1, 3, 5, 4)  # [1, heads, L, E], one image
    mask = torch.arange(5).view(1, 1, 1, 5) <= torch.arange(5).view(1, 1, 5, 1)
    return nn.functional.scaled_dot_product_attention(heads * 0.5, heads.flip(2), heads.cos(), attn_mask=mask)


def _grid_sample(x: torch.Tensor) -> torch.Tensor:
    maps = x.reshape(3, 1, 1, 5).expand(3, 2, 4, 5)  # 3 rows per image, each with its own grid
    grid = torch.stack([x.tanh(), x.flip(2).tanh()], -1).reshape(3, 1, 5, 2)
    return nn.functional.grid_sample(maps, grid, align_corners=False)


CASES: dict[str, Callable[[], nn.Module]] = {
    "conv, batch norm, pooling, upsampling (folded into dim 0)": lambda: nn.Sequential(
        nn.Unflatten(2, (1, 5)), nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.MaxPool2d((1, 2)),
        nn.Upsample(scale_factor=2.0), nn.GroupNorm(2, 4)),
    "cat with a constant": lambda: Fn(lambda x: torch.cat([x, torch.ones(1, 2, 5)], 1)),
    "gather and scatter": lambda: Fn(lambda x: x.gather(2, x.argsort(2)).scatter(2, x.argsort(2)[..., :2], 7.0)),
    "sort, topk, cumsum": lambda: Fn(lambda x: x.sort(-1)[0] + x.topk(5, -1)[0].cumsum(1)),
    "index_select by the image's own index": lambda: Fn(lambda x: x.index_select(2, x[0, 0].argsort())),
    "index_select of whole rows, an index repeated": lambda: Fn(_rows_by_order),
    "index_select of a vector's entries": lambda: Fn(lambda x: x[0, 0].index_select(0, x[0, 1].argsort()).view(1, 5)),
    "select_scatter into a constant": lambda: Fn(lambda x: torch.zeros(1, 3, 5).select_scatter(x[:, 0], 1, 1)),
    "copy into a buffer": lambda: Fn(_copy_into_buffer),
    "an op decomposed (renorm has no batching rule)": lambda: Fn(lambda x: torch.renorm(x, 2, 1, 1.0)),
    "multiclass_nms (batched by definition)": lambda: Fn(_nms),
    "linear and layer_norm (images as one more leading dim)": lambda: nn.Sequential(
        nn.Linear(5, 6), nn.LayerNorm(6), nn.Linear(6, 2)),
    "linear of a linear's relu (Faster R-CNN's box head)": lambda: Fn(
        lambda x: nn.functional.linear(nn.functional.linear(x, torch.ones(6, 5)).relu(), torch.ones(2, 6))),
    "concat": lambda: Fn(lambda x: torch.concat([x, x.exp()], 2)),
    "attention over one image's heads, with a mask": lambda: Fn(_attention),
    "grid_sample with a grid per row": lambda: Fn(_grid_sample),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_image_gets_what_the_per_image_graph_gives_it(case: str) -> None:
    torch.manual_seed(0)
    model = CASES[case]().eval()
    gm = capture(model, (torch.randn(1, 3, 5),)).graph_module
    batched, _ = vectorize(gm, [torch.randn(2, 3, 5)], [{0: torch.export.Dim("batch", min=1, max=8)}])
    for size in (1, 5):
        x = torch.randn(size, 3, 5)
        with torch.no_grad():
            got = batched(x)
            for image in range(size):
                want = gm(x[image : image + 1])
                for g, w in zip(got, want, strict=True):
                    torch.testing.assert_close(g[image], w, rtol=1e-5, atol=1e-5)


def test_an_op_with_no_batching_rule_is_named_with_its_line() -> None:
    gm = capture(Fn(lambda x: torch.histc(x, bins=4)), (torch.randn(1, 3, 5),)).graph_module
    with pytest.raises(Unbatchable) as refused:
        vectorize(gm, [torch.randn(2, 3, 5)], [{0: torch.export.Dim("batch", min=1, max=8)}])
    assert "aten.histc" in refused.value.reason and "test_vectorize_rules.py" in refused.value.reason
    assert "\n" not in refused.value.reason


def test_an_op_whose_vmap_rule_reads_the_batch_as_a_number_is_named() -> None:
    """vmap's rule for take_along_dim fixes a symbolic batch; the op is named where it happens,
    not in torch.export's later 'Constraints violated', which names none."""
    gm = capture(Fn(lambda x: torch.take_along_dim(x, x.argsort(2), 2)), (torch.randn(1, 3, 5),)).graph_module
    with pytest.raises(Unbatchable, match=r"take_along_dim.* fixes the batch size \(File .*test_vectorize_rules"):
        vectorize(gm, [torch.randn(2, 3, 5)], [{0: torch.export.Dim("batch", min=1, max=8)}])


def test_a_per_image_graph_keeps_its_own_dynamic_dim() -> None:
    """Captured with a dynamic width (RT-DETR's H and W), the graph reads that size (``sym_size``)
    and keeps it dynamic beside the batch."""
    model = Fn(lambda x: nn.functional.layer_norm(x, (x.shape[2],)).reshape(1, -1, x.shape[2]) + x.shape[2])
    width = torch.export.Dim("width", min=2, max=16)
    gm = capture(model, (torch.randn(1, 3, 5),), dynamic_shapes=({2: width},)).graph_module
    assert any(n.target is torch.ops.aten.sym_size.int for n in gm.graph.nodes)
    batched, program = vectorize(gm, [torch.randn(2, 3, 5)], [{0: torch.export.Dim("batch", min=1, max=8), 2: width}])
    user = program.graph_signature.user_inputs[0]
    shape = next(n for n in program.graph.nodes if n.name == user).meta["val"].shape
    assert all(isinstance(d, torch.SymInt) for d in (shape[0], shape[2]))
    for size, w in ((1, 5), (4, 9), (3, 2)):
        x = torch.randn(size, 3, w)
        with torch.no_grad():
            got = batched(x)[0]
            want = torch.cat([gm(x[i : i + 1])[0] for i in range(size)])
        torch.testing.assert_close(got, want.unsqueeze(1), rtol=1e-5, atol=1e-5)
