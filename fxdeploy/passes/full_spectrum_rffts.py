"""A one-sided real FFT is the first half of the full complex FFT of the same input, for OpenVINO.

``torch.fft.rfft`` (``aten.fft_rfft``) becomes ONNX's ``DFT`` with ``onesided=1``,
whose OpenVINO import (2026.4) keeps a unit dim that is not there: [2, 65, 1, 2] for eager's
[2, 65] complex values, so every rfft artifact failed lower()'s check. ``DFT`` over a complex input
imports right. The FFT of a real signal is conjugate-symmetric, and rfft returns its bins 0 to
n // 2, which is what slicing ``fft_fft`` of the input cast to complex gives, with the same ``n``
(the real input cut or zero-padded to it first: ONNX has no pad of complex values), dim and
normalization. It costs one full transform where
the one-sided one is half of it. OpenVINO's complex DFT is right over a matrix's rows, not over
the last axis of a rank-3 input, so the other dims are flattened into one around it. A transformed
dim of dynamic size is left as it is (its half would be a size torch.export cannot bound).
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import replaced_by
from fxdeploy.settings import Settings

aten = torch.ops.aten
_COMPLEX = {torch.float32: torch.complex64, torch.float64: torch.complex128}


def full_spectrum_rffts(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    modified = False
    for node in list(gm.graph.nodes):
        if check(node) is not None:
            continue
        x, n, dim, norm = _arguments(node)
        with gm.graph.inserting_before(node):
            new: list[torch.fx.Node] = []
            kept = _half_spectrum(gm.graph, x, n, dim, norm, node.meta["val"].shape[dim], new)
        replaced_by(new, node)
        node.replace_all_uses_with(kept)
        gm.graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)  # run_pipeline lints and recompiles a modified graph


def _half_spectrum(
    graph: torch.fx.Graph, x: torch.fx.Node, n: int | None, dim: int, norm: str | None, half: int,
    new: list[torch.fx.Node],
) -> torch.fx.Node:
    """The rfft as ops: the transformed dim moved last, the others flattened into one (OpenVINO's
    complex DFT over the last axis of a rank-3 input computes other values; over a matrix's rows
    it is right), cut or zero-padded to n while real (ONNX pads no complex values), cast, the full
    transform, its first ``half`` bins, and the dims put back."""
    def call(target: object, *args: object, **kwargs: object) -> torch.fx.Node:
        new.append(graph.call_function(target, args, kwargs))
        return new[-1]

    value = x.meta["val"]
    last = value.dim() - 1
    if dim != last:
        x = call(aten.transpose.int, x, dim, last)
    size = value.shape[dim]
    lead = [s if isinstance(s, int) else call(aten.sym_size.int, x, i) for i, s in enumerate(value.shape) if i != dim]
    if n is not None and n != size:
        width = [0, n - size]
        x = call(aten.slice.Tensor, x, last, 0, n) if n < size else call(aten.constant_pad_nd.default, x, width, 0.0)
        size = n
    flat = call(aten.reshape.default, x, [-1, size]) if value.dim() != 2 else x
    full = call(aten.fft_fft.default, call(aten._to_copy.default, flat, dtype=_COMPLEX[value.dtype]), None, 1, norm)
    kept = call(aten.slice.Tensor, full, 1, 0, half)
    if value.dim() != 2:
        kept = call(aten.reshape.default, kept, [*lead, half])
    return call(aten.transpose.int, kept, dim, last) if dim != last else kept


def check(node: torch.fx.Node) -> str | None:
    """None when ``node`` is a real FFT of a float32 or float64 input, else why not."""
    if node.op != "call_function" or node.target is not aten.fft_rfft.default:
        return "not aten.fft_rfft"
    x = node.args[0]
    value = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor) or value.dtype not in _COMPLEX:
        return "its input is not a float32 or float64 tensor with a recorded value"
    if not isinstance(node.meta.get("val"), torch.Tensor):
        return "no output value recorded"
    _, n, dim, _ = _arguments(node)
    if not isinstance(value.shape[dim], int) or (n is not None and not isinstance(n, int)):
        return "a dynamic size transformed: its half would be a size torch.export cannot bound"
    return None


def _arguments(node: torch.fx.Node) -> tuple[torch.fx.Node, object, int, str | None]:
    """self, n, dim (non-negative), norm, with fft_rfft's defaults."""
    names = ("self", "n", "dim", "norm")
    given = dict(zip(names, node.args, strict=False)) | dict(node.kwargs)
    dim = given.get("dim", -1)
    return given["self"], given.get("n"), dim % node.args[0].meta["val"].dim(), given.get("norm")
