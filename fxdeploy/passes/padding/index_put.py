"""``dest[index] = values`` by padded indices (torchvision's multi-scale RoIAlign writes each
level's results by the level's selected indices): the padded rows write to a scratch row past the
end, which is then dropped, so they never overwrite a row eager leaves alone. A boolean mask over
selected rows (``kept[kept > t] = 0``) writes element by element, padding included, which no valid
row reads: row-wise. Only values selected by such a mask (``kept[m] *= 2``) are refused."""

from __future__ import annotations

import torch

from fxdeploy.passes.graph_utils import call_site, is_op
from fxdeploy.passes.padding.rows import PaddedRows
from fxdeploy.passes.padding.rule import CompactionError, Rule, replace_node

aten = torch.ops.aten
Node = torch.fx.Node


def _check(node: Node, rows: PaddedRows) -> str | None:
    if not is_op(node, "aten.index_put.default", "aten.index_put_.default"):
        return "not aten.index_put"
    if not any(rows.rows(i) is not None for i in node.args[1] if i is not None):
        return "no index comes from a selection"
    if _by_mask(node) and not rows.dims(node.args[2]):
        return "a value of a static size written by a boolean mask over selected rows: elementwise, row-wise"
    return None


def _by_mask(node: Node) -> bool:
    return any(isinstance(i, Node) and i.meta["val"].dtype == torch.bool for i in node.args[1])


def _replace(gm: torch.fx.GraphModule, node: Node, rows: PaddedRows) -> None:
    dest, indices = node.args[0], node.args[1]
    if _by_mask(node):
        raise CompactionError(f"{call_site(node)}: x[mask] = f(x[mask]) over selected rows writes as many values as "
                              "the mask selects, which padding does not keep; write torch.where(mask, f(x), x)")
    if len(indices) != 1:
        raise CompactionError(f"{call_site(node)}: index_put with {len(indices)} index tensors; a row index is padded")
    call = gm.graph.call_function
    shape = [rows.bound(e) if (e := rows.size(size)) is not None else size for size in dest.meta["val"].shape]
    if not all(isinstance(size, int) for size in shape):
        raise CompactionError(f"{call_site(node)}: index_put into a tensor of shape {shape}; a static one is padded")
    scratch = call(aten.new_zeros.default, (dest, [1, *shape[1:]]))
    extended = call(aten.cat.default, ([dest, scratch],))
    index = call(aten.where.ScalarOther, (rows.valid(rows.rows(indices[0])), indices[0], shape[0]))
    written = call(aten.index_put.default, (extended, [index], *node.args[2:]))
    replace_node(node, call(aten.slice.Tensor, (written, 0, 0, shape[0])))


INDEX_PUT = Rule("index_put", _check, _replace)
