"""lower()'s check sees bare output leaves, not a detection structure: cut them into detections.

Each leaf computed from an NMS result comes with the dim that indexes its rows (the manifest's
``rows_dim``). Leaves whose rows line up (the same rows dim and the same sizes up to it) hold one
field each of the same detections. Their roles follow from the reference's shapes and dtypes: the
first float [..., K, 4] leaf holds the boxes, the first float [..., K] the scores, the first integer
[..., K] the labels; every other leaf is a per-detection field. A group without one of these
roles pairs without it (see fxdeploy.parity.match.Detections).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fxdeploy.parity.match import Detections

_ROLES = ("boxes", "scores", "labels")


@dataclass(frozen=True)
class RowGroup:
    """Leaves whose rows line up: their output indices and the dim that indexes the rows."""

    indices: tuple[int, ...]
    rows_dim: int

    @property
    def name(self) -> str:
        numbers = ", ".join(f"#{i}" for i in self.indices)
        return f"output {numbers}" if len(self.indices) == 1 else f"outputs {numbers}"


def group_rows(shapes: dict[int, tuple[tuple[int, ...], int]]) -> list[RowGroup]:
    """{output index: (reference shape, rows dim)} -> the groups, in output order."""
    groups: dict[tuple[int, tuple[int, ...]], list[int]] = {}
    for index, (shape, rows_dim) in shapes.items():
        groups.setdefault((rows_dim, shape[: rows_dim + 1]), []).append(index)
    return [RowGroup(tuple(indices), rows_dim) for (rows_dim, _), indices in groups.items()]


def roles(group: RowGroup, reference: dict[int, torch.Tensor]) -> dict[int, str]:
    """Output index -> "boxes", "scores", "labels" or the field's name ("output #i")."""
    found: dict[int, str] = {}
    for index in group.indices:
        leaf = reference[index]
        role = _role(leaf.shape[group.rows_dim + 1 :], leaf.is_floating_point())
        found[index] = role if role is not None and role not in found.values() else f"output #{index}"
    return found


def per_image(group: RowGroup, leaves: dict[int, torch.Tensor], named: dict[int, str]) -> list[Detections]:
    """One side's leaves of a group as Detections, one per image (the dims before the rows dim:
    none for one image's [K, ...], the batch for [B, K, ...])."""
    flat = {i: _images(leaves[i], group.rows_dim) for i in group.indices}
    count = len(next(iter(flat.values())))
    out = []
    for image in range(count):
        parts = {named[i]: t[image] for i, t in flat.items()}
        fields = {name: t for name, t in parts.items() if name not in _ROLES}
        out.append(Detections(parts.get("boxes"), parts.get("scores"), parts.get("labels"), fields))
    return out


def _role(trailing: torch.Size, floating: bool) -> str | None:
    if floating and tuple(trailing) == (4,):
        return "boxes"
    if not trailing:
        return "scores" if floating else "labels"
    return None


def _images(leaf: torch.Tensor, rows_dim: int) -> torch.Tensor:
    return leaf.flatten(0, rows_dim - 1) if rows_dim else leaf[None]
