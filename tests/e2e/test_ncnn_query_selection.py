"""A top-k query selection in mid-network on ncnn: engine, host, engine, host.

RT-DETR picks its decoder queries with ``topk`` over the encoder's scores and ``gather``; ncnn has
neither layer. ``host_postprocess_split`` runs the selection on the host between two engine
stages (and the NMS after the second), so the model lowers to ncnn and matches eager. Before
stages, the selection stayed in the one engine part and pnnx left torch.topk and torch.gather
unconverted (LoweringError).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import fxdeploy
from fxdeploy.passes import op_histogram
from tests.e2e.ncnn_detectors import assert_matches_eager, lower_on_ncnn, ncnn_stages

CLASSES, QUERIES, SIZE, STRIDE, WIDTH = 3, 6, 32, 4, 16
CELLS = (SIZE // STRIDE) ** 2


class QuerySelectingDetector(nn.Module):
    """An encoder, RT-DETR's query selection, a decoder, a box refinement, and NMS. With
    ``context``, the decoder also reads a value made from the encoder's memory: the split makes it
    in the second engine (checked on the passed graph only: pnnx, given that stage, reads its
    [B, N, C] inputs with the batch kept and this ncnn returns unstable values for it, which the
    lowering's example run reports as a LoweringError)."""

    def __init__(self, context: bool = False) -> None:
        super().__init__()
        self.with_context = context
        self.backbone = nn.Conv2d(3, WIDTH, 3, stride=STRIDE, padding=1)
        self.enc_score = nn.Linear(WIDTH, CLASSES)
        self.enc_box = nn.Linear(WIDTH, 4)
        self.context = nn.Linear(WIDTH, WIDTH)
        self.decoder = nn.Linear(WIDTH, WIDTH)
        self.cls = nn.Linear(WIDTH, CLASSES)
        self.box = nn.Linear(WIDTH, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        memory = torch.relu(self.backbone(x)).flatten(2).transpose(1, 2)  # [B, cells, WIDTH]
        index = self.enc_score(memory).amax(-1).topk(QUERIES, dim=1).indices  # [B, Q]
        queries = memory.gather(1, index.unsqueeze(-1).repeat(1, 1, WIDTH))
        reference = self.enc_box(memory).gather(1, index.unsqueeze(-1).repeat(1, 1, 4)).sigmoid()
        if self.with_context:  # a value only the decoder reads (see test_the_stages_hold_...)
            queries = queries + self.context(memory).mean(1, keepdim=True)
        hidden = torch.relu(self.decoder(queries)).reshape(x.shape[0], QUERIES, WIDTH)
        center = reference[..., :2] + 0.1 * torch.tanh(self.box(hidden)[..., :2])
        extent = reference[..., 2:] * 0.25 + 0.05
        boxes = torch.cat([center - extent, center + extent], -1) * SIZE
        return fxdeploy.ops.multiclass_nms(
            boxes, self.cls(hidden).sigmoid(), iou_threshold=0.5, score_threshold=0.05,
            max_output_boxes_per_class=QUERIES, keep_top_k=QUERIES * CLASSES,
        )


def query_selecting_detector() -> tuple[nn.Module, tuple[torch.Tensor]]:
    """A CLI factory (``tests.e2e.test_ncnn_query_selection:query_selecting_detector``), as
    ``lower_on_ncnn`` builds it: seed 0, a batch of 2."""
    torch.manual_seed(0)
    return QuerySelectingDetector().eval(), (torch.randn(2, 3, SIZE, SIZE),)


@pytest.fixture(scope="module")
def lowered() -> tuple[nn.Module, fxdeploy.Deployed]:
    return lower_on_ncnn(QuerySelectingDetector, SIZE)


def test_the_query_selection_runs_on_the_host_and_matches_eager(lowered: tuple[nn.Module, fxdeploy.Deployed]) -> None:
    assert_matches_eager(*lowered, SIZE, score_atol=1e-4)


def test_four_stages_hand_over_per_image_values(lowered: tuple[nn.Module, fxdeploy.Deployed]) -> None:
    """The first engine hands over the scores the top-k reads, and the boxes and the memory the
    gathers read, all per image; the second engine reads only what the host gathered."""
    _, deployed = lowered
    plan = deployed.manifest["info"]["ncnn"]
    assert [stage["kind"] for stage in plan["stages"]] == ["engine", "host", "engine", "host"]
    first, second = plan["stages"][0], plan["stages"][2]
    assert sorted(o["shape"] for o in first["outputs"]) == sorted([[CELLS], [CELLS, 4], [CELLS, WIDTH]])
    assert (second["param"], second["bin"]) == ("model.2.ncnn.param", "model.2.ncnn.bin")
    assert {tuple(source)[0] for source in second["sources"]} == {1}  # no graph input, not even for a size
    assert {"host.1.pt", "host.3.pt", "model.ncnn.param"} <= set(deployed.manifest["files"])


def test_the_stages_hold_what_each_runtime_can_run() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, SIZE, SIZE)
    reference, gm, parts = ncnn_stages(QuerySelectingDetector(context=True), x, {"x": {0: ("batch", 1, 4)}})
    stages = [op_histogram(stage.module) for stage in parts.stages]
    assert {"aten.topk.default", "aten.gather.default", "aten.repeat.default"} <= set(stages[1])
    assert "fxdeploy.multiclass_nms.default" in stages[3]
    for op in ("aten.topk.default", "aten.gather.default", "fxdeploy.multiclass_nms.default"):
        assert op not in stages[0] and op not in stages[2], op
    assert "aten.mean.dim" in stages[2] and "aten.mean.dim" not in stages[0]  # the context, made late
    assert "aten.conv2d.default" in stages[0]
    with torch.no_grad():
        for got, want in zip(gm(x), reference(x), strict=True):
            assert torch.equal(got, want)
