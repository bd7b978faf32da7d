"""Rewrite data-dependent NMS into ``multiclass_nms`` with static, padded outputs.

Matches ``nms``/``batched_nms`` (fxdeploy's ops, which torchvision's functions are substituted
with, and the ``torchvision::nms`` op node) together with the data-dependent code around them:
a boolean score filter feeding the boxes (``boxes[scores > t]``), a ``keep[:k]`` slice, and
``x[keep]`` gathers. The NMS then runs over all N boxes with filtered-out scores at -inf, the
gathers read ``det_index`` and zero the padded rows, and the count of kept boxes becomes a hidden
output. Outputs that had a data-dependent length are recorded for the host to trim, so the
deployed model returns exactly the shapes eager PyTorch returns.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import call_site, is_op, refresh_meta, size_symbols, unbacked_symbols
from fxdeploy.passes.tensorize_outputs import HIDDEN, OUTPUT_NAMES, TRIM
from fxdeploy.settings import Settings

aten = torch.ops.aten
NMS_OPS = ("fxdeploy.nms.default", "fxdeploy.batched_nms.default", "torchvision.nms.default")
HOW_TO = (
    "Return a fixed number of detections instead (keep[:max_det] and x[keep] are rewritten), or "
    "register a tensor-only replacement of the postprocessing with @fxdeploy.substitute(...) that "
    "calls fxdeploy.ops.multiclass_nms."
)


class NMSRewriteError(ValueError):
    """An NMS whose surroundings cannot be made static; the message names the call site."""


@dataclass
class Match:
    nms: torch.fx.Node
    boxes: torch.fx.Node
    scores: torch.fx.Node
    idxs: torch.fx.Node | None
    mask: torch.fx.Node | None
    keep: torch.fx.Node  # the nms node, or its keep[:k] slice
    top_k: int
    gathers: list[torch.fx.Node]


def substitute_nms(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    nodes = [n for n in gm.graph.nodes if is_op(n, *NMS_OPS)]
    if not nodes:
        return PassResult(gm, False)
    output = next(n for n in gm.graph.nodes if n.op == "output")
    leaf_dims = [_dim_symbols(getattr(v, "meta", {}).get("val")) for v in output.args[0]]
    counts: dict[str, tuple[torch.fx.Node, set[str]]] = {}
    for number, node in enumerate(nodes):
        node_symbols = unbacked_symbols(node.meta.get("val"))
        counts[f"nms_count_{number}"] = (_rewrite(gm, match(node)), node_symbols)
    gm.graph.eliminate_dead_code()
    _add_hidden_outputs(gm, output, counts, leaf_dims)
    refresh_meta(gm)
    _check_static(gm)
    return PassResult(gm, True)


def match(nms: torch.fx.Node) -> Match:
    """Check a NMS node's pattern; raise NMSRewriteError with the reason when it does not fit."""
    boxes, scores = nms.args[0], nms.args[1]
    idxs = nms.args[2] if str(nms.target) == "fxdeploy.batched_nms.default" else None
    sources = [boxes, scores] + ([idxs] if idxs is not None else [])
    masks = {_mask_of(s) for s in sources}
    if len(masks) != 1:
        raise NMSRewriteError(f"NMS at {call_site(nms)}: its inputs are filtered by different masks. {HOW_TO}")
    mask = masks.pop()
    full = [s.args[0] if mask is not None else s for s in sources]
    n_boxes = full[0].meta["val"].shape[0]
    keep, top_k = nms, n_boxes
    users = list(nms.users)
    slices = [u for u in users if is_op(u, "aten.slice.Tensor")]
    if len(users) == 1 and slices and _is_head_slice(slices[0]):
        bound = int(slices[0].args[3])
        keep, top_k = slices[0], min(bound, n_boxes) if isinstance(n_boxes, int) else bound
    if not isinstance(top_k, int):
        raise NMSRewriteError(
            f"NMS at {call_site(nms)} runs over a dynamic number of boxes with no bound on its "
            f"result. Slice it: keep[:max_det]. {HOW_TO}"
        )
    gathers = []
    for user in keep.users:
        if is_op(user, "aten.index.Tensor") and list(user.args[1]) == [keep]:
            gathers.append(user)
        elif user.op != "output":
            raise NMSRewriteError(
                f"NMS at {call_site(nms)}: its result is used by {user.target} at {call_site(user)}, "
                f"which has a data-dependent size. {HOW_TO}"
            )
    return Match(nms, full[0], full[1], full[2] if idxs is not None else None, mask, keep, top_k, gathers)


def _mask_of(node: torch.fx.Node) -> torch.fx.Node | None:
    if is_op(node, "aten.index.Tensor") and len(node.args[1]) == 1:
        mask = node.args[1][0]
        if isinstance(mask, torch.fx.Node) and mask.meta["val"].dtype == torch.bool:
            return mask
    return None


def _is_head_slice(node: torch.fx.Node) -> bool:
    args = list(node.args) + [None] * (5 - len(node.args))
    return args[1] == 0 and args[2] in (0, None) and isinstance(args[3], int) and args[4] in (1, None)


def _rewrite(gm: torch.fx.GraphModule, m: Match) -> torch.fx.Node:
    graph = gm.graph
    call = graph.call_function
    with graph.inserting_before(m.keep if m.keep is not m.nms else m.nms):
        scores = m.scores
        if m.mask is not None:
            scores = call(aten.where.ScalarOther, (m.mask, scores, float("-inf")))
        boxes = m.boxes
        if m.idxs is not None:  # torchvision's coordinate trick: classes never overlap
            top = call(aten.add.Tensor, (call(aten.max.default, (boxes,)), 1))
            offsets = call(aten.mul.Tensor, (call(aten._to_copy.default, (m.idxs,), {"dtype": torch.float32}), top))
            boxes = call(aten.add.Tensor, (boxes, call(aten.unsqueeze.default, (offsets, 1))))
        batched_boxes = call(aten.unsqueeze.default, (boxes, 0))
        batched_scores = call(aten.unsqueeze.default, (call(aten.unsqueeze.default, (scores, 0)), 2))
        iou = float(m.nms.args[-1])
        result = call(
            torch.ops.fxdeploy.multiclass_nms.default,
            (batched_boxes, batched_scores, iou, float("-inf"), m.top_k, -1, m.top_k, -1, False),
        )
        index = call(aten.select.int, (call(operator.getitem, (result, 4)), 0, 0))
        count = call(operator.getitem, (result, 3))
        valid = call(aten.lt.Tensor, (call(aten.arange.default, (m.top_k,), {"dtype": torch.long}), count))
        safe = call(aten.clamp.default, (index, 0))
    for gather in m.gathers:
        source = gather.args[0]
        source = source.args[0] if m.mask is not None and _mask_of(source) is m.mask else source
        with graph.inserting_before(gather):
            picked = call(aten.index_select.default, (source, 0, safe))
            rank = source.meta["val"].dim()
            shaped = call(aten.view.default, (valid, [m.top_k] + [1] * (rank - 1)))
            zeroed = call(aten.where.ScalarOther, (shaped, picked, 0))
        gather.replace_all_uses_with(zeroed)
        graph.erase_node(gather)
    m.keep.replace_all_uses_with(index)
    return count


def _dim_symbols(value: object) -> list[set[str]]:
    if not isinstance(value, torch.Tensor):
        return []
    return [size_symbols(size) for size in value.shape]


def _add_hidden_outputs(
    gm: torch.fx.GraphModule, output: torch.fx.Node,
    counts: dict[str, tuple[torch.fx.Node, set[str]]], leaf_dims: list[list[set[str]]],
) -> None:
    """Append each NMS count as a hidden output; map every data-dependent output onto its count."""
    names = list(gm.meta.get(OUTPUT_NAMES) or [f"output_{i}" for i in range(len(leaf_dims))])
    trim: dict[str, dict[str, object]] = dict(gm.meta.get(TRIM, {}))
    for name, dims in zip(names, leaf_dims, strict=True):
        for dim, dim_symbols in enumerate(dims):
            if not dim_symbols:
                continue
            owners = [c for c, (_, symbols) in counts.items() if dim_symbols & symbols]
            if len(owners) != 1:
                raise NMSRewriteError(
                    f"output {name!r} has a data-dependent dim {dim} that "
                    f"{'no NMS' if not owners else 'several NMS calls'} determine(s). {HOW_TO}"
                )
            trim[name] = {"dim": dim, "count": owners[0]}
    output.args = (tuple(output.args[0]) + tuple(node for node, _ in counts.values()),)
    gm.meta[OUTPUT_NAMES] = names + list(counts)
    gm.meta[HIDDEN] = list(gm.meta.get(HIDDEN, [])) + list(counts)
    gm.meta[TRIM] = trim


def _check_static(gm: torch.fx.GraphModule) -> None:
    for node in gm.graph.nodes:
        if unbacked_symbols(node.meta.get("val")):
            raise NMSRewriteError(
                f"after substitute_nms, {node.name} ({node.target}) at {call_site(node)} still has a "
                f"data-dependent size {tuple(node.meta['val'].shape)}. {HOW_TO}"
            )
