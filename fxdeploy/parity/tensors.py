"""Element-wise comparison of one output tensor against its reference, allclose-style.

A value passes when |got - ref| <= atol + rtol * |ref|. NaN must face NaN and infinities must
match exactly, so a runtime that turns a finite value into inf (or back) fails visibly rather
than vanishing from the max.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class TensorComparison:
    name: str
    ok: bool
    max_abs: float
    max_rel: float
    detail: str = ""

    @property
    def kind(self) -> str:
        return "tensor"


def as_tensor(value: object) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    return None


def compare_tensor(name: str, ref: torch.Tensor, got: torch.Tensor, atol: float, rtol: float) -> TensorComparison:
    """Shapes must be equal; dtypes only need the same kind (float vs integer vs bool)."""
    if tuple(ref.shape) != tuple(got.shape):
        return TensorComparison(name, False, float("inf"), float("inf"),
                                f"shape {tuple(got.shape)}, expected {tuple(ref.shape)}")
    if _kind(ref) != _kind(got):
        return TensorComparison(name, False, float("inf"), float("inf"),
                                f"dtype {got.dtype}, expected {ref.dtype}")
    if ref.numel() == 0:
        return TensorComparison(name, True, 0.0, 0.0)
    want, have = ref.double(), got.double()
    nan_mismatch = torch.isnan(want) != torch.isnan(have)
    inf_mismatch = (torch.isinf(want) | torch.isinf(have)) & (want != have)
    finite = torch.isfinite(want) & torch.isfinite(have)
    diff = (have - want).abs()[finite]
    scale = want.abs()[finite]
    max_abs = float(diff.max()) if diff.numel() else 0.0
    max_rel = float((diff / scale.clamp_min(1e-12)).max()) if diff.numel() else 0.0
    bad = int((diff > atol + rtol * scale).sum()) + int(nan_mismatch.sum()) + int(inf_mismatch.sum())
    detail = f"{bad} of {ref.numel()} values outside atol {atol:g} + rtol {rtol:g}" if bad else ""
    return TensorComparison(name, bad == 0, max_abs, max_rel, detail)


def compare_value(name: str, ref: object, got: object) -> TensorComparison:
    """Non-tensor leaves (ints, strings, None) must be equal."""
    ok = type(ref) is type(got) and ref == got
    return TensorComparison(name, ok, 0.0 if ok else float("inf"), 0.0 if ok else float("inf"),
                            "" if ok else f"value {got!r}, expected {ref!r}")


def _kind(tensor: torch.Tensor) -> str:
    if tensor.dtype == torch.bool:
        return "bool"
    return "float" if tensor.is_floating_point() or tensor.is_complex() else "int"
