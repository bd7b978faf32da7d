"""How close an artifact's tensor output must be to eager's: the check's tolerance (``atol`` from
the settings, INT8's bounds), a half dtype's epsilon, and integers held element by element.
"""

from __future__ import annotations

from typing import Any

import torch

from fxdeploy.errors import LoweringError

INT8_ATOL = 0.1
"""lower()'s tolerance for an INT8 artifact against fp32 eager: 10% of the output's largest
magnitude (at least 1), for paired detections' scores and for tensors (which past it may still
pass as rounding noise: ``INT8_RMS``)."""

INT8_MAX_ERROR = 0.25
INT8_RMS = 0.1
"""lower()'s bounds for an INT8 artifact's tensor leaves against fp32 eager, where an element is
past the check's atol (``tolerance``). INT8 rounding is noise spread over every element, so the
error is bounded as noise is: its RMS at most ``INT8_RMS`` of the output's RMS (at least 1), and
no element off by more than ``INT8_MAX_ERROR`` of the output's largest magnitude (at least 1).
Measured on CNNs trained on the digits data set (tests/e2e/test_int8.py), top-1 equal to fp32's:
ONNX Runtime's logits within 3.6% (max) and 2.0% (RMS) on the held-out images; OpenVINO's within
11% and 7.0% on a YOLO-style split block, whose every element moves. A wrong artifact is far
outside: OpenVINO's miscomputed split block (11% top-1) was off by twice the logits' largest magnitude."""


DTYPE_ULPS = 2
"""A half or bfloat16 output is compared to at least ``DTYPE_ULPS`` of its dtype's epsilon (times
its magnitude): eager's own half result is one rounding of a float32 computation, and a runtime's
is another (fp16's epsilon, 9.8e-4, is past the default atol). So is every output of a model that
itself computes in half or bfloat16 at fp32 settings (``torch.autocast`` in forward, a layer cast
with ``.half()``): eager's rounding there is one of several a runtime may take (OpenVINO runs a
bfloat16 region's ops in float32 and rounds once)."""


def tolerance(settings: Any, graph: torch.fx.GraphModule | None = None) -> float:
    """The check's atol: ``Settings.atol``, raised to ``INT8_ATOL`` for an INT8 artifact, and to
    ``DTYPE_ULPS`` of the epsilon of the half dtype ``graph`` computes in at fp32 settings."""
    atol = max(settings.atol, INT8_ATOL) if settings.precision == "int8" else settings.atol
    half = computed_in(graph) if graph is not None and settings.precision == "fp32" else None
    return max(atol, DTYPE_ULPS * torch.finfo(half).eps) if half is not None else atol


def computed_in(graph: torch.fx.GraphModule) -> torch.dtype | None:
    """The coarsest half dtype an op of ``graph`` computes in: its result and one of its tensor
    inputs of that dtype (a conversion to it, or a comparison of it, computes nothing in it)."""
    found = set()
    for node in graph.graph.nodes:
        value = node.meta.get("val")
        if node.op != "call_function" or not isinstance(value, torch.Tensor):
            continue
        if value.dtype in (torch.bfloat16, torch.float16) and any(
            isinstance(i.meta.get("val"), torch.Tensor) and i.meta["val"].dtype == value.dtype
            for i in node.all_input_nodes
        ):
            found.add(value.dtype)
    return torch.bfloat16 if torch.bfloat16 in found else next(iter(found), None)


def check_close(have: torch.Tensor, ref: torch.Tensor, atol: float, where: str, int8: bool = False) -> float:
    if ref.numel() == 0:
        return 0.0
    if ref.dtype in (torch.float16, torch.bfloat16):
        atol = max(atol, DTYPE_ULPS * torch.finfo(ref.dtype).eps)
    a, b = have.detach().double(), ref.detach().double()  # a parameter returned as it is requires grad
    finite = torch.isfinite(a) & torch.isfinite(b)
    same_special = (a == b) | (torch.isnan(a) & torch.isnan(b))  # inf == inf, nan ~ nan
    if bool((~(finite | same_special)).any()):
        raise LoweringError(f"{where}: NaN/Inf positions differ from eager")
    if not bool(finite.any()):
        return 0.0
    difference = (a - b)[finite]
    error = float(difference.abs().max())
    if not ref.dtype.is_floating_point and not int8:
        _check_integers(difference, b[finite], error, atol, where)
        return error
    scale = max(1.0, float(b[finite].abs().max()))
    if int8 and error > atol * scale:  # past the tolerance asked for: still within INT8's noise bounds?
        _check_noise(difference, b[finite], error, scale, where)
    elif error > atol * scale:
        raise LoweringError(f"{where} differs from eager by {error:.3g} (tolerance {atol * scale:.3g})")
    return error


def _check_integers(difference: torch.Tensor, ref: torch.Tensor, error: float, atol: float, where: str) -> None:
    """Integers are held to a bound of their own size, element by element: a float tolerance
    scaled by the tensor's largest value let a wrapped small code (an int8 -56 read as 127) pass
    beside a code of 5e6. Exact below 1 / atol; a float truncated to a large integer keeps its
    rounding's slack."""
    bound = atol * ref.abs().clamp(min=1.0)
    over = difference.abs() > bound
    if bool(over.any()):
        index = int(over.nonzero()[0, 0])
        raise LoweringError(f"{where} differs from eager by {error:.3g}; an integer element is "
                            f"{float(ref[index] + difference[index]):.10g} where eager's is {float(ref[index]):.10g}")


def _check_noise(difference: torch.Tensor, ref: torch.Tensor, error: float, scale: float, where: str) -> None:
    """INT8's bounds (``INT8_RMS``, ``INT8_MAX_ERROR``) on one tensor leaf's error."""
    rms, rms_scale = float(difference.pow(2).mean().sqrt()), max(1.0, float(ref.pow(2).mean().sqrt()))
    if error > INT8_MAX_ERROR * scale:
        raise LoweringError(f"{where} differs from eager by {error:.3g} at one element (INT8 tolerance "
                            f"{INT8_MAX_ERROR * scale:.3g})")
    if rms > INT8_RMS * rms_scale:
        raise LoweringError(f"{where} differs from eager by {rms:.3g} RMS (INT8 tolerance {INT8_RMS * rms_scale:.3g})")
