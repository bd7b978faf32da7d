"""Which leaves of a substitution's unpacked output hold rows: found by moving one row at a time.

An unpack is the user's Python (``[dets[i, :n] for i, n in enumerate(counts)]``): fxdeploy cannot
read it, but it knows which of the tensor-only outputs hold rows (the manifest's output leaves,
``fxdeploy.passes.output_rows``). Adding a mark to row r of image b of those outputs, and seeing
where the unpacked result changes, finds the unpacked leaves that hold rows: the change lands in
one index of their dim 0, a different one for another row. Those leaves are then compared as rows
(``fxdeploy.parity.outputs``), their context (thresholds, order) the rows' own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fxdeploy.parity.excuses import Context
from fxdeploy.parity.rows import RowsSpec

_MARK = 1.0


def row_paths(
    unpack: Callable[[Any], Any], result: Any, specs: list[RowsSpec | None], score_eps: float
) -> dict[str, Context]:
    """Paths (as ``fxdeploy.parity.outputs`` names them) of the unpacked leaves that hold rows, each
    with its rows' context; ``result``: the tensor-only output, its leaves matching ``specs``."""
    leaves, tree = pytree.tree_flatten(result)
    if len(leaves) != len(specs):
        return {}
    base = _paths(unpack(result))
    found: dict[str, Context] = {}
    for spec in {s for s in specs if s is not None and s.kind in ("nms", "selected", "ranked")}:
        moved = [_moved_rows(unpack, leaves, tree, specs, spec, row, base) for row in (0, 1)]
        for path, index in moved[0].items():
            if path in moved[1] and moved[1][path] != index:
                found[path] = spec.context(score_eps)
    return found


def _moved_rows(
    unpack: Callable[[Any], Any], leaves: list[Any], tree: pytree.TreeSpec, specs: list[RowsSpec | None],
    spec: RowsSpec, row: int, base: dict[str, Any],
) -> dict[str, int]:
    """Unpacked path -> the one index along its dim 0 that changed when ``row`` of the first image
    of ``spec``'s float leaves was marked."""
    marked = []
    for leaf, leaf_spec in zip(leaves, specs, strict=True):
        if leaf_spec == spec and isinstance(leaf, torch.Tensor) and leaf.is_floating_point():
            leaf = leaf.clone()
            index = (0,) * spec.dim + (row,)
            if leaf.dim() > spec.dim and leaf.shape[spec.dim] > row:
                leaf[index] += _MARK
        marked.append(leaf)
    try:
        after = _paths(unpack(pytree.tree_unflatten(marked, tree)))
    except Exception:  # noqa: BLE001 - an unpack that cannot take marked values holds no provable rows
        return {}
    changed = {}
    for path, value in after.items():
        before = base.get(path)
        if not (isinstance(value, torch.Tensor) and isinstance(before, torch.Tensor)) or value.shape != before.shape:
            continue
        if value.dim() == 0 or not value.shape[0]:
            continue
        rows = (value != before).reshape(value.shape[0], -1).any(1).nonzero().flatten().tolist()
        if len(rows) == 1:
            changed[path] = rows[0]
    return changed


def _paths(tree: Any) -> dict[str, Any]:
    """Leaves by the dotted path ``fxdeploy.parity.outputs`` names them with ("0", "1.boxes")."""
    flat, _ = pytree.tree_flatten_with_path(tree)
    return {".".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path): leaf for path, leaf in flat}
