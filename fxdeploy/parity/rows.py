"""lower()'s check sees bare output leaves, not a detection structure: cut them into detections.

Which leaves hold rows, the dim that indexes them and what decided them come from the graph
(the manifest's output leaves, ``fxdeploy.passes.output_rows``): ``RowsSpec``. Leaves whose rows
line up (the same rows dim and the same sizes up to it) hold one field each of the same rows.
Their roles follow from the reference's shapes and dtypes: the first float [..., K, 4] leaf holds
the boxes, the first float [..., K] the scores (a ranked group's key leaf before any), the first
integer [..., K] the labels; every other leaf is a per-detection field. A group that is one float
leaf of whole rows ([..., K, F], Ultralytics' (x1, y1, x2, y2, conf, cls)) has its columns'
roles read off the reference (``row_columns``). A group without a role pairs without it
(see fxdeploy.parity.boxes.Detections).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from fxdeploy.parity.boxes import Detections
from fxdeploy.parity.excuses import Context

_ROLES = ("boxes", "scores", "labels")
_ORDER = {"nms": "score", "ranked": "score", "selected": "eager"}


@dataclass(frozen=True)
class RowsSpec:
    """How one output leaf holds rows (an output leaf's ``rows`` entries in the manifest)."""

    dim: int
    kind: str = "rows"
    """"nms", "selected", "ranked" (fxdeploy.passes.output_rows), "count"; "rows": a bare flag,
    rows in any order and nothing excused."""
    iou_threshold: float | None = None
    score_thresholds: tuple[float, ...] = ()
    key: int | None = None
    """A ranked leaf's keys: the position of the leaf that holds them among the compared leaves."""
    nms: int | None = None
    """Which NMS the rows (or a count leaf's count) come from: a count trims its NMS's rows."""
    tag: int = 0
    """Leaves of different tags never group: the images of a per-image check, each its own rows."""

    @classmethod
    def of(cls, leaf: Mapping[str, Any], positions: Mapping[str, int]) -> RowsSpec | None:
        """None for a plain leaf; ``positions``: the compared leaves' names -> their positions. A
        manifest from before ``rows`` existed flags ``detections`` only."""
        if leaf.get("rows") == "count":
            return cls(0, "count", nms=leaf.get("nms"))
        if not leaf.get("detections"):
            return None
        return cls(int(leaf.get("rows_dim", 1)), str(leaf.get("rows", "nms")), leaf.get("iou_threshold"),
                   tuple(leaf.get("score_thresholds", ())), positions.get(leaf.get("rank_key", "")), leaf.get("nms"))

    def context(self, score_eps: float) -> Context:
        capped = self.kind in ("nms", "ranked")
        return Context(self.iou_threshold, self.score_thresholds, score_eps, _ORDER.get(self.kind, "none"), capped)


def specs(leaves: list[Mapping[str, Any]], images: int = 1) -> list[RowsSpec | None]:
    """Each of ``leaves`` (the manifest's output leaves that are compared, in order) as a spec;
    ``images`` > 1: the leaves repeat once per image (a per-image artifact's list over images),
    each image's rows apart from the others'."""
    positions = {leaf["name"]: i for i, leaf in enumerate(leaves)}
    found = [RowsSpec.of(leaf, positions) for leaf in leaves]
    def moved(spec: RowsSpec, image: int) -> RowsSpec:
        return replace(spec, tag=image, key=None if spec.key is None else spec.key + image * len(found))

    return [None if spec is None else moved(spec, image) for image in range(images) for spec in found]


@dataclass(frozen=True)
class RowGroup:
    """Leaves whose rows line up: their output indices, the dim that indexes the rows, and their
    specs merged (every threshold any of them records)."""

    indices: tuple[int, ...]
    spec: RowsSpec

    @property
    def rows_dim(self) -> int:
        return self.spec.dim

    @property
    def name(self) -> str:
        numbers = ", ".join(f"#{i}" for i in self.indices)
        return f"output {numbers}" if len(self.indices) == 1 else f"outputs {numbers}"


def group_rows(shapes: dict[int, tuple[tuple[int, ...], RowsSpec]]) -> list[RowGroup]:
    """{output index: (reference shape, its spec)} -> the groups, in output order. Rows of different
    NMS calls never group: a list of per-image dicts holds each image's rows at the same padded size,
    and grouped, the second image's fields were paired by the first image's boxes."""
    groups: dict[tuple[int, int, tuple[int, ...], int | None], list[int]] = {}
    for index, (shape, spec) in shapes.items():
        groups.setdefault((spec.tag, spec.dim, shape[: spec.dim + 1], spec.nms), []).append(index)
    return [RowGroup(tuple(indices), _merged([shapes[i][1] for i in indices])) for indices in groups.values()]


def nms_context(specs: Sequence[RowsSpec | None]) -> Context | None:
    """The context of the NMS rows among ``specs`` (their IoU threshold, every score threshold),
    for detections compared outside the check's groups; None where no leaf holds an NMS's rows."""
    held = [s for s in specs if s is not None and s.kind == "nms"]
    return _merged(held).context(0.0) if held else None


def _merged(specs: list[RowsSpec]) -> RowsSpec:
    first = specs[0]
    ious = [s.iou_threshold for s in specs if s.iou_threshold is not None]
    thresholds = tuple(sorted({t for s in specs for t in s.score_thresholds}))
    key = next((s.key for s in specs if s.key is not None), None)
    nms = next((s.nms for s in specs if s.nms is not None), None)
    return RowsSpec(first.dim, first.kind, ious[0] if ious else None, thresholds, key, nms, first.tag)


def roles(group: RowGroup, reference: dict[int, torch.Tensor], key: int | None = None) -> dict[int, str]:
    """Output index -> "boxes", "scores", "labels" or the field's name ("output #i"); ``key``, the
    output holding a ranked group's keys, takes the scores."""
    found: dict[int, str] = {key: "scores"} if key in group.indices else {}
    for index in group.indices:
        if index in found:
            continue
        leaf = reference[index]
        role = _role(leaf.shape[group.rows_dim + 1 :], leaf.is_floating_point())
        found[index] = role if role is not None and role not in found.values() else f"output #{index}"
    return found


def per_image(group: RowGroup, leaves: dict[int, torch.Tensor], named: dict[int, str],
              columns: dict[str, Any] | None = None) -> list[Detections]:
    """One side's leaves of a group as Detections, one per image (the dims before the rows dim:
    none for one image's [K, ...], the batch for [B, K, ...]); ``columns`` split a group of
    whole rows into roles (``row_columns``)."""
    flat = {i: _images(leaves[i], group.rows_dim) for i in group.indices}
    count = len(next(iter(flat.values())))
    out = []
    for image in range(count):
        parts = {named[i]: t[image] for i, t in flat.items()}
        if columns is not None:
            (whole,) = parts.values()
            out.append(as_rows(whole, columns))
            continue
        fields = {name: t for name, t in parts.items() if name not in _ROLES}
        out.append(Detections(parts.get("boxes"), parts.get("scores"), parts.get("labels"), fields))
    return out


def row_columns(group: RowGroup, reference: dict[int, torch.Tensor]) -> dict[str, Any] | None:
    """For a group of one float leaf of whole rows [..., K, F], F > 4, the roles of its columns
    (``columns_of``); None where the group is not one such leaf or no score column is found."""
    (index,) = group.indices if len(group.indices) == 1 else (None,)
    leaf = reference.get(index) if index is not None else None
    if leaf is None or not leaf.is_floating_point() or leaf.dim() != group.rows_dim + 2 or leaf.shape[-1] <= 4:
        return None
    return columns_of(_images(leaf, group.rows_dim))


def columns_of(images: torch.Tensor) -> dict[str, Any] | None:
    """Which columns of [images, K, F] rows hold the box (four columns with x1 <= x2 and y1 <= y2 in
    every row), the score (the one column that never rises down the rows of any image, as an NMS
    orders them) and the label (the one column of whole numbers >= 0 besides); the rest stay fields."""
    images = images.double()
    if images.shape[1] < 3 or images.shape[-1] <= 4:
        return None  # too few rows to tell a score column from chance
    falling = ((images[:, 1:] <= images[:, :-1]) | images[:, 1:].isnan()).all(1).all(0)
    scores = falling.nonzero().flatten().tolist()
    if len(scores) != 1:
        return None
    whole = ((images == images.round()) & (images >= 0)).all(1).all(0)
    labels = [c for c in whole.nonzero().flatten().tolist() if c not in scores]
    taken = set(scores) | set(labels[:1] if len(labels) == 1 else [])
    box = next((c for c in range(images.shape[-1] - 3)
                if not taken & set(range(c, c + 4)) and _corners(images[..., c : c + 4])), None)
    columns: dict[str, Any] = {"scores": scores[0]}
    if len(labels) == 1:
        columns["labels"] = labels[0]
    if box is not None:
        columns["boxes"] = slice(box, box + 4)
        taken |= set(range(box, box + 4))
    rest = [c for c in range(images.shape[-1]) if c not in taken]
    if rest:
        columns["rest"] = rest
    return columns


def as_rows(leaf: torch.Tensor, columns: dict[str, Any] | None) -> Detections:
    """One image's [n, F] rows as Detections: by ``columns``, or the whole row as one field."""
    if columns is None:
        return Detections(fields={"row": leaf})
    parts = {role: leaf[..., cols] for role, cols in columns.items()}
    return Detections(parts.get("boxes"), parts.get("scores"), parts.get("labels"),
                      {n: t for n, t in parts.items() if n not in _ROLES})


def _corners(columns: torch.Tensor) -> bool:
    """Four columns that read as (x1, y1, x2, y2) in every row."""
    return bool(((columns[..., 0] <= columns[..., 2]) & (columns[..., 1] <= columns[..., 3])).all())


def _role(trailing: torch.Size, floating: bool) -> str | None:
    if floating and tuple(trailing) == (4,):
        return "boxes"
    if not trailing:
        return "scores" if floating else "labels"
    return None


def _images(leaf: torch.Tensor, rows_dim: int) -> torch.Tensor:
    return leaf.flatten(0, rows_dim - 1) if rows_dim else leaf[None]
