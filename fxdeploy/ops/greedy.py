"""Vectorized greedy NMS, shared by every reference kernel.

The obvious greedy loop visits one box at a time, and so costs one Python iteration per box.
Here the sorted candidates of all groups (an image × class, or an image) are processed together,
in blocks of columns: a block is first tested against the boxes kept so far, then resolved
internally in *rounds* (a box is decided once every box before it that could suppress it is
decided). The Python loops therefore run over blocks and rounds, never over boxes.

The module is TorchScript-compatible because the TorchScript target inlines these kernels.
It avoids ``from __future__ import annotations`` for the same reason.
"""

import torch
from torch import Tensor


def normalize_corners(boxes: Tensor) -> Tensor:
    """Return (min, max) corners: ONNX NonMaxSuppression accepts either diagonal corner pair."""
    lo = torch.minimum(boxes[..., 0:2], boxes[..., 2:4])
    hi = torch.maximum(boxes[..., 0:2], boxes[..., 2:4])
    return torch.cat([lo, hi], dim=-1)


def box_area(boxes: Tensor) -> Tensor:
    return (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])


def suppression_matrix(
    a: Tensor, area_a: Tensor, b: Tensor, area_b: Tensor, iou_threshold: float, work: Tensor
) -> Tensor:
    """[G, P, Q] bool: IoU(a_p, b_q) > iou_threshold, for coordinate-major a [4, G, P], b [4, G, Q].

    Coordinate-major layout keeps every broadcast operand contiguous (~10x faster than slicing
    [..., 4] boxes), and the float intermediates live in ``work`` (at least 3*G*P*Q elements,
    reused across calls) instead of fresh allocations, whose page faults dominated the cost.
    The arithmetic follows ONNX Runtime's float32 kernel step by step (clamped intersection,
    ``area_a + area_b - inter``, one division), so the IoU == threshold boundary lands on the
    same side. A zero union gives 0/0 = NaN, and NaN > t is False: IoU 0, as the spec requires.
    """
    shape = [a.shape[1], a.shape[2], b.shape[2]]
    size = shape[0] * shape[1] * shape[2]
    inter = work[:size].view(shape)
    other = work[size : 2 * size].view(shape)
    spare = work[2 * size : 3 * size].view(shape)
    torch.minimum(a[2].unsqueeze(2), b[2].unsqueeze(1), out=inter)
    inter.sub_(torch.maximum(a[0].unsqueeze(2), b[0].unsqueeze(1), out=other)).clamp_(min=0.0)
    torch.minimum(a[3].unsqueeze(2), b[3].unsqueeze(1), out=other)
    other.sub_(torch.maximum(a[1].unsqueeze(2), b[1].unsqueeze(1), out=spare)).clamp_(min=0.0)
    inter.mul_(other)
    torch.add(area_a.unsqueeze(2), area_b.unsqueeze(1), out=other).sub_(inter)
    return inter.div_(other) > iou_threshold


def _workspace(work: Tensor, groups: int, rows: int, cols: int) -> Tensor:
    """``work`` if it holds three [groups, rows, cols] arrays, else a larger one."""
    need = 3 * groups * rows * cols
    if work.numel() >= need:
        return work
    return work.new_empty((max(need, 2 * work.numel()),))


def _resolve_block(sup: Tensor, alive: Tensor) -> Tensor:
    """Greedy keep inside one block, in rounds.

    ``sup[g, i, j]`` (only for i < j) says that i would suppress j. In each round, boxes
    suppressed by a kept box are dropped, and every box with no undecided suppressor left is
    kept. The first undecided box of a group is always kept, so each round makes progress.
    """
    keep = torch.zeros_like(alive)
    undecided = alive.clone()
    sup_f = sup.to(torch.float32)
    while bool(undecided.any()):
        by_kept = torch.bmm(keep.to(torch.float32).unsqueeze(1), sup_f).squeeze(1) > 0
        undecided = undecided & ~by_kept
        blocked = torch.bmm(undecided.to(torch.float32).unsqueeze(1), sup_f).squeeze(1) > 0
        new = undecided & ~blocked
        keep = keep | new
        undecided = undecided & ~new
    return keep


def _block_size(groups: int) -> int:
    """Block width: [G, T, T] block matrices stay under 4M elements whatever G is."""
    budget = 1 << 22  # a local: TorchScript cannot read module globals
    size = 256
    while size > 16 and groups * size * size > budget:
        size = size // 2
    return size


def greedy_keep(
    boxes: Tensor,
    valid: Tensor,
    iou_threshold: float,
    max_keep: int,
    labels: Tensor | None = None,
) -> Tensor:
    """Greedy NMS over groups of candidates already sorted in visiting order.

    boxes [G, L, 4] (corners the IoU is taken on), valid [G, L] (a prefix per group).
    Returns keep [G, L]. At most ``max_keep`` boxes are kept per group: the greedy stops there.
    With ``labels`` [G, L], only boxes with equal labels suppress each other (batched_nms).
    It stays one function (over the 60-line rule) so that the block loop reads as one algorithm:
    each block updates the kept boxes, areas, labels and counts that the next block tests against.
    """
    groups, length = valid.shape[0], valid.shape[1]
    keep = torch.zeros_like(valid)
    if groups == 0 or length == 0 or max_keep <= 0:
        return keep
    coords = boxes.permute(2, 0, 1).contiguous()  # [4, G, L]
    area = box_area(boxes)
    cap = min(max_keep, length)
    # One spare slot (index cap) absorbs the writes of boxes that were not kept.
    kept = coords.new_zeros((4, groups, cap + 1))
    kept_area = area.new_zeros((groups, cap + 1))
    kept_labels = torch.zeros((groups, cap + 1), dtype=torch.long, device=boxes.device)
    count = torch.zeros((groups,), dtype=torch.long, device=boxes.device)
    size = _block_size(groups)
    work = coords.new_empty((3 * groups * size * size,))
    upper = torch.ones((size, size), dtype=torch.bool, device=boxes.device).triu(1)
    for start in range(0, length, size):
        stop = min(start + size, length)
        alive = valid[:, start:stop] & (count < max_keep).unsqueeze(1)
        if not bool(alive.any()):
            break  # valid is a prefix and count only grows: nothing later is alive either
        block = coords[:, :, start:stop]
        block_area = area[:, start:stop]
        block_labels = labels[:, start:stop] if labels is not None else None
        n_kept = int(count.max())
        width = stop - start
        if n_kept > 0:
            work = _workspace(work, groups, width, n_kept)
            hit = suppression_matrix(block, block_area, kept[:, :, :n_kept], kept_area[:, :n_kept], iou_threshold, work)
            # Groups with fewer kept boxes than n_kept have empty slots; they suppress nothing.
            filled = torch.arange(n_kept, device=boxes.device).unsqueeze(0) < count.unsqueeze(1)
            hit = hit & filled.unsqueeze(1)
            if block_labels is not None:
                hit = hit & (block_labels.unsqueeze(2) == kept_labels[:, :n_kept].unsqueeze(1))
            alive = alive & ~hit.any(2)
        work = _workspace(work, groups, width, width)
        sup = suppression_matrix(block, block_area, block, block_area, iou_threshold, work)
        sup = sup & upper[:width, :width]
        if block_labels is not None:
            sup = sup & (block_labels.unsqueeze(2) == block_labels.unsqueeze(1))
        kept_now = _resolve_block(sup, alive)
        rank = kept_now.to(torch.long).cumsum(1)
        kept_now = kept_now & (count.unsqueeze(1) + rank <= max_keep)
        slot = torch.where(kept_now, count.unsqueeze(1) + rank - 1, torch.full_like(rank, cap))
        kept.scatter_(2, slot.unsqueeze(0).expand(4, -1, -1), block)
        kept_area.scatter_(1, slot, block_area)
        if block_labels is not None:
            kept_labels.scatter_(1, slot, block_labels)
        keep[:, start:stop] = kept_now
        count = count + kept_now.to(torch.long).sum(1)
    return keep
