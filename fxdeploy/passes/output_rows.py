"""Which outputs hold rows whose order or membership float noise can change: read off the graph.

lower()'s check compares these outputs row by row as sets (``fxdeploy.parity``, and
docs/checking.md for the rules), whatever structure the model returns them in. Three kinds:

- ``nms``: computed from an NMS (``multiclass_nms`` after ``pad_compactions``). The rows are the
  kept boxes; the NMS's IoU threshold decides which survive.
- ``selected``: rows a data-dependent selection kept (``x[scores > t]``), which the padding pass
  trims on the host (its ``Trim`` records). Eager's order, a threshold decides membership.
- ``ranked``: computed from a top-k or a sort, with an output that holds its keys (the top-k's
  values, or a view or elementwise function of them alone): near-equal keys may come in either
  order, and at the last rank either of two near-equal candidates may be taken.

Each comes with the dim that indexes its rows and the thresholds that decided which rows exist:
the NMS's IoU threshold, and every constant a float tensor was compared with on the way (score
thresholds). These are what the check's excuses are allowed to read; nothing else is excused.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import torch

from fxdeploy.ops.names import MULTICLASS_NMS, is_nms

Node = torch.fx.Node
_COMPARISONS = frozenset({"aten.gt.Scalar", "aten.ge.Scalar", "aten.lt.Scalar", "aten.le.Scalar"})
_RANKINGS = frozenset({"aten.topk.default", "aten.sort.default", "aten.sort.stable"})
_IOU_ARG, _SCORE_ARG = 2, 3
"""multiclass_nms's iou_threshold and score_threshold, by position (fxdeploy/ops/library.py)."""


def describe_rows(
    gm: torch.fx.GraphModule, leaves: list[Node], trimmed: dict[Node, int]
) -> dict[Node, dict[str, Any]]:
    """For each output leaf that holds such rows, its description for the manifest's output leaf:
    ``rows`` (the kind), ``rows_dim``, ``iou_threshold`` (nms), ``score_thresholds``, and for a
    ranked leaf ``rank_key``, the position in ``leaves`` of the leaf holding its keys. ``trimmed``:
    the leaves the padding pass trims, and along which dim."""
    thresholds = _score_thresholds(gm)
    found: dict[Node, dict[str, Any]] = {}
    nms_calls = _nms_nodes(gm)
    for kind, seeds in (("nms", nms_calls), ("ranked", _rankings(gm))):
        for seed in seeds:
            size = _row_count(seed)
            if size is None:
                continue
            key = _key_leaf(seed, leaves) if kind == "ranked" else None
            if kind == "ranked" and key is None:
                continue  # no output holds the keys: compared position by position
            for node in _descendants(seed):
                if node in found:
                    continue  # the later NMS or ranking decides (reversed order below)
                entry: dict[str, Any] = {"rows": kind, "size": size}
                if kind == "nms":
                    entry["iou_threshold"] = float(seed.args[_IOU_ARG])
                    entry["nms"] = nms_calls.index(seed)
                if key is not None:
                    entry["rank_key"] = key
                found[node] = entry
    described = _counts(nms_calls, leaves)
    for leaf in leaves:
        entry = found.get(leaf)
        value = leaf.meta.get("val") if isinstance(leaf, Node) else None
        if not isinstance(value, torch.Tensor) or leaf in described:
            continue
        if entry is None and leaf in trimmed:
            entry = {"rows": "selected", "rows_dim": trimmed[leaf]}
        elif entry is not None:
            entry = _placed(entry, value, trimmed.get(leaf))
        if entry is not None:
            described[leaf] = entry | {"score_thresholds": sorted(thresholds.get(leaf, set()))}
    return described


def _placed(entry: dict[str, Any], value: torch.Tensor, trim_dim: int | None) -> dict[str, Any] | None:
    """The entry with the dim that indexes its rows: the dim of the seed's size K, or where none has
    that size, the dim the padding pass compacts (``trim_dim``): the rows of several NMS calls or
    rankings joined before a selection (SSD's per-class loop, ``cat`` of each class's kept boxes,
    then the padded rows dropped) are still those rows, at that dim. Neither: None."""
    size = entry["size"]
    rows_dim = next((d for d, s in enumerate(value.shape) if isinstance(s, int) and s == size), trim_dim)
    kept = {k: v for k, v in entry.items() if k != "size"}
    return None if rows_dim is None else kept | {"rows_dim": rows_dim}


def _counts(nms_calls: list[Node], leaves: list[Node]) -> dict[Node, dict[str, Any]]:
    """Leaves that hold an NMS's ``num_dets`` (itself, or a view or cast of it alone): the check
    trims that NMS's padded rows by them, on each side by its own count."""
    found = {}
    for number, nms in enumerate(nms_calls):
        count = next((u for u in nms.users if u.target is operator.getitem and u.args[1] == 3), None)
        for leaf in leaves:
            if count is not None and _computed_from_alone(leaf, count):
                found[leaf] = {"rows": "count", "nms": number}
    return found


def _computed_from_alone(leaf: Any, source: Node) -> bool:
    """``leaf`` is ``source``, or made from it by ops that read no other tensor."""
    node = leaf
    while isinstance(node, Node) and node is not source:
        tensors = [a for a in node.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor)]
        node = tensors[0] if len(tensors) == 1 and node.op == "call_function" else None
    return node is source


def _nms_nodes(gm: torch.fx.GraphModule) -> list[Node]:
    """multiclass_nms calls, the last first: a node after several (a two-stage detector's proposals,
    then its detections) belongs to the last one."""
    return [n for n in reversed(gm.graph.nodes) if is_nms(n, (MULTICLASS_NMS,))]


def _rankings(gm: torch.fx.GraphModule) -> list[Node]:
    return [n for n in reversed(gm.graph.nodes) if n.op == "call_function" and str(n.target) in _RANKINGS]


def _row_count(seed: Node) -> int | None:
    """K: the static number of rows a seed makes (an NMS's keep_top_k, a top-k's k)."""
    value = seed.meta.get("val")
    first = value[0] if isinstance(value, (list, tuple)) and value else value
    shape = getattr(first, "shape", ())
    if is_nms(seed, (MULTICLASS_NMS,)):
        return shape[1] if len(shape) >= 2 and isinstance(shape[1], int) else None
    dim = seed.args[2] if str(seed.target) == "aten.topk.default" and len(seed.args) > 2 else -1
    if str(seed.target) == "aten.sort.default":
        dim = seed.args[1] if len(seed.args) > 1 else seed.kwargs.get("dim", -1)
    size = shape[dim] if shape else None
    return size if isinstance(size, int) and size > 1 else None


def _key_leaf(ranking: Node, leaves: list[Node]) -> int | None:
    """The output leaf holding the ranking's values: the values themselves, or a node computed from
    them alone (a view, a sigmoid, a scale), never mixed with another tensor."""
    values = next((u for u in ranking.users if u.target is operator.getitem and u.args[1] == 0), None)
    if values is None:
        return None
    return next((position for position, leaf in enumerate(leaves) if _computed_from_alone(leaf, values)), None)


def _descendants(seed: Node) -> list[Node]:
    seen: dict[Node, None] = {}
    frontier = [seed]
    while frontier:
        node = frontier.pop()
        if node not in seen:
            seen[node] = None
            frontier.extend(node.users)
    return list(seen)


def _score_thresholds(gm: torch.fx.GraphModule) -> dict[Node, set[float]]:
    """Per node, the constants that a float tensor was compared with anywhere upstream of it, and
    the finite score thresholds of the NMS calls upstream of it."""
    found: dict[Node, set[float]] = {}
    for node in gm.graph.nodes:
        own: set[float] = set()
        for source in node.all_input_nodes:
            own |= found.get(source, set())
        constant = _compared_constant(node)
        if constant is not None:
            own = own | {constant}
        if own:
            found[node] = own
    return found


def _compared_constant(node: Node) -> float | None:
    if is_nms(node, (MULTICLASS_NMS,)):
        value = node.args[_SCORE_ARG] if len(node.args) > _SCORE_ARG else None
    elif node.op == "call_function" and str(node.target) in _COMPARISONS:
        source = node.args[0].meta.get("val") if isinstance(node.args[0], Node) else None
        value = node.args[1] if isinstance(source, torch.Tensor) and source.is_floating_point() else None
    else:
        return None
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None
