"""Sizes that torch names anew. torch 2.11's capture gives ``keep[:k]`` of ``u5`` rows a symbol of
its own (``u6``, asserted ``u6 <= u5``) where torch 2.13's writes ``Min(k, u5)``; fxdeploy admits
torch >= 2.6. Uncounted, such rows kept their padding as if it were valid: torchvision's RetinaNet
under torch 2.11 returned 300 rows an image (lower()'s check refused it). These tests rename the
size in a graph that this torch captured, as torch 2.11 does, then pad it and run it against eager."""

from __future__ import annotations

import pytest
import torch

from fxdeploy import ops
from fxdeploy.passes.graph_utils import fill_meta, is_op
from fxdeploy.passes.padding import CompactionError, pad_compactions
from fxdeploy.settings import Settings
from tests.passes.padding.helpers import assert_matches_eager, captured, rand


def _rename(node: torch.fx.Node) -> None:
    """Give the node's dim 0 a new data-dependent symbol, as torch 2.11's capture does for a slice."""
    value = node.meta["val"]
    shape_env = value.fake_mode.shape_env
    with shape_env.ignore_fresh_unbacked_symbols():
        size = shape_env.create_unbacked_symint()
    with value.fake_mode:
        node.meta["val"] = value.new_empty((size, *value.shape[1:]))


def _rename_through(gm: torch.fx.GraphModule, nodes: list[torch.fx.Node]) -> None:
    """Rename each node's dim 0, then recompute what reads it: the new symbol flows downstream, as
    in torch 2.11's graph (``kept[keep]`` of ``u6`` kept indices has ``u6`` rows)."""
    renamed = set(nodes)
    for node in nodes:
        _rename(node)
    after = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and node not in renamed and renamed & set(node.all_input_nodes):
            renamed.add(node)
            after.append(node)
    fill_meta(after)


def _slices(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if is_op(n, "aten.slice.Tensor") and n.args[1] == 0]


def _padded(model: torch.nn.Module, *args: torch.Tensor, rename: int) -> torch.fx.GraphModule:
    gm = captured(model, *args)
    slices = _slices(gm)
    assert len(slices) == rename, [s.format_node() for s in slices]
    _rename_through(gm, slices)
    result = pad_compactions(gm, Settings())
    result.graph_module.recompile()
    return result.graph_module


class KeepTen(torch.nn.Module):
    """A score filter, an NMS and ``keep[:10]``: the NMS rule caps the NMS at 10."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kept = x[x[:, 4] > 0.3]
        keep = ops.nms(kept[:, :4], kept[:, 4], 0.5)[:10]
        return kept[keep, :4] * 2, kept[keep, 4]


def _boxes(seed: int, rows: int = 40) -> tuple[torch.Tensor]:
    x = rand(rows, 5, seed=seed)
    x[:, 2:4] = x[:, :2] + 0.05 + x[:, 2:4] * 0.2  # small boxes: most survive the NMS
    x[:, 4] = x[:, 4] * (seed % 4) / 3  # seed 1 keeps few, the others more than 10
    return (x,)


def test_an_nms_head_slice_named_anew_is_counted() -> None:
    model = KeepTen()
    gm = _padded(model, *_boxes(0), rename=1)
    counts = assert_matches_eager(model, gm, _boxes, seeds=6)
    assert min(counts) < 10 and max(counts) == 10, counts  # the cap reached and not


class Windows(torch.nn.Module):
    """Slices of selected rows from a fixed start to a fixed stop: row-wise, each a count of its own."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        kept = x[x[:, 0] > 0.5]
        return kept[:, 1:] * 2, kept[2:7] + 1, kept[:3], kept[1:-2]  # the last stops 2 rows before the count


def _rows(seed: int) -> tuple[torch.Tensor]:
    x = rand(12, 3, seed=seed)
    x[:, 0] = x[:, 0] * seed / 5  # 0, 1, a few and many rows pass
    return (x,)


def test_slices_named_anew_are_counted() -> None:
    model = Windows()
    gm = _padded(model, *_rows(3), rename=3)
    counts = assert_matches_eager(model, gm, _rows, seeds=8)
    assert min(counts) < 3 and max(counts) > 7, counts  # each window empty, partial and full


class Strided(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[x[:, 0] > 0.5][0:6:2]


def test_a_strided_slice_named_anew_is_refused() -> None:
    with pytest.raises(CompactionError, match=r"test_renamed_sizes\.py.*\[0:6:2\].*fixed stop"):
        _padded(Strided(), *_rows(4), rename=1)


class Column(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[x[:, 0] > 0.5].unbind(1)[2] * 2


def test_a_size_no_rule_counts_is_refused_not_padded() -> None:
    gm = captured(Column(), *_rows(4))
    (column,) = [n for n in gm.graph.nodes if n.args and is_op(n.args[0], "aten.unbind.int") and n.args[1] == 2]
    _rename(column)
    with pytest.raises(CompactionError, match=r"test_renamed_sizes\.py.*no padding rule counted.*report it"):
        pad_compactions(gm, Settings())
