"""Walk a model's output structure and compare it leaf by leaf, detections as detections."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from fxdeploy.capture import eval_mode
from fxdeploy.parity.detections import DetectionComparison, compare_detections, compare_row_tensor
from fxdeploy.parity.excuses import Context
from fxdeploy.parity.recognize import as_detections
from fxdeploy.parity.tensors import TensorComparison, as_tensor, compare_tensor, compare_value

Comparison = TensorComparison | DetectionComparison


@dataclasses.dataclass(frozen=True)
class Tolerances:
    atol: float = 1e-4
    rtol: float = 1e-3
    iou: float = 0.99
    score_atol: float = 1e-4
    detections: Context | None = None
    """The NMS a detection dict's rows come from (``rows.nms_context``): where given, what float
    noise can flip is excused as in lower()'s check (a score near its threshold)."""


def compare_outputs(
    ref: Any, got: Any, tol: Tolerances | None = None, rows: dict[str, Context] | None = None
) -> list[Comparison]:
    """One comparison per tensor leaf or per detection group, named by its path in the output;
    ``rows``: paths of tensors that hold one image's rows ([n, F]), compared as rows with their
    context (``fxdeploy.parity.probe`` finds them in a substitution's unpacked output)."""
    results: list[Comparison] = []
    _walk("", ref, got, tol or Tolerances(), results, rows or {})
    return results


def max_abs_error(results: list[Comparison]) -> float:
    return max((r.max_abs for r in results), default=0.0)


def _walk(path: str, ref: Any, got: Any, tol: Tolerances, out: list[Comparison], rows: dict[str, Context]) -> None:
    name = path or "output"
    ref, got = _plain(ref), _plain(got)
    if path in rows and isinstance(ref, torch.Tensor) and isinstance(got, torch.Tensor):
        out.append(compare_row_tensor(name, ref, got, rows[path], tol.score_atol, (tol.atol, tol.rtol)))
        return
    ref_dets = as_detections(ref)
    if ref_dets is not None:
        got_dets = as_detections(got)
        if got_dets is None:
            out.append(DetectionComparison(name, [], tol.iou, tol.score_atol,
                                           f"expected detections, got {_describe(got)}"))
            return
        out.append(compare_detections(name, ref_dets[0], got_dets[0], tol.iou, tol.score_atol, (tol.atol, tol.rtol),
                                      tol.detections))
        if not ref_dets[1]:
            return
        if not isinstance(got, Mapping):
            out.append(_mismatch(name, f"{_describe(got)}, expected dict with keys {sorted(map(str, ref))}"))
            return
        ref = {k: v for k, v in ref.items() if k not in ref_dets[1]}
        got = {k: v for k, v in got.items() if k not in got_dets[1]}
    if isinstance(ref, Mapping):
        if not isinstance(got, Mapping) or set(ref) != set(got):
            out.append(_mismatch(name, f"{_describe(got)}, expected dict with keys {sorted(map(str, ref))}"))
            return
        for key in ref:
            _walk(f"{path}.{key}" if path else str(key), ref[key], got[key], tol, out, rows)
        return
    ref_t, got_t = _leaf(ref), _leaf(got)
    if ref_t is not None:
        if got_t is None:
            out.append(_mismatch(name, f"{_describe(got)}, expected a tensor {tuple(ref_t.shape)}"))
        else:
            out.append(compare_tensor(name, ref_t, got_t, tol.atol, tol.rtol))
        return
    if isinstance(ref, Sequence) and not isinstance(ref, str):
        if not isinstance(got, Sequence) or isinstance(got, str) or len(got) != len(ref):
            out.append(_mismatch(name, f"{_describe(got)}, expected a sequence of {len(ref)}"))
            return
        for index, (r, g) in enumerate(zip(ref, got, strict=True)):
            _walk(f"{path}.{index}" if path else str(index), r, g, tol, out, rows)
        return
    out.append(compare_value(name, ref, got))


def _plain(value: Any) -> Any:
    """Dataclasses (and transformers' ModelOutput) as dicts without their None fields: a loaded
    artifact rebuilds plain dicts of the tensors it has, and a None output is no output."""
    if isinstance(value, Mapping):
        return {k: v for k, v in value.items() if v is not None} if any(v is None for v in value.values()) else value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if getattr(value, f.name) is not None}
    return value


def _leaf(value: Any) -> torch.Tensor | None:
    """Tensors and arrays; Python numbers too, since a runtime may hand back a 0-dim tensor."""
    tensor = as_tensor(value)
    if tensor is None and isinstance(value, (int, float)) and not isinstance(value, bool):
        tensor = torch.tensor(value)
    return tensor


def _mismatch(name: str, detail: str) -> TensorComparison:
    return TensorComparison(name, False, float("inf"), float("inf"), f"structure differs: got {detail}")


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor {tuple(value.shape)}"
    if isinstance(value, Mapping):
        return f"dict with keys {sorted(map(str, value))}"
    if isinstance(value, Sequence) and not isinstance(value, str):
        return f"{type(value).__name__} of {len(value)}"
    return type(value).__name__


def reference_outputs(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> Any:
    """Eager outputs in eval mode without autograd, with the model's modes restored afterwards."""
    with eval_mode(model), torch.no_grad():
        return model(*args, **(kwargs or {}))
