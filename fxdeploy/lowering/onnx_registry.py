"""torch.onnx's exporter, with its op registry built once per opset and translation table.

``torch.onnx.export`` builds a registry of every torchlib function on each call (about 1 s of CPU
here, as long as exporting a small model takes), registers the custom translations in it, then
hands it to its exporter core, which only reads it. fxdeploy exports many programs with the same
few tables (one per flavour), so it builds each registry once and calls that core with it, exactly
as ``torch.onnx.export`` does for an ExportedProgram. Where the core is not there with that
signature (another torch), every export goes through ``torch.onnx.export``: the same ONNX, slower.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

_REGISTRIES: dict[tuple[Any, ...], Any] = {}
_LOCK = threading.Lock()
_CORE_ARGUMENTS = {"registry", "input_names", "output_names", "optimize", "opset_version", "report", "verify"}


def export_program(program: torch.export.ExportedProgram, args: tuple[Any, ...], input_names: Sequence[str],
                   output_names: Sequence[str], table: dict[Any, Callable], opset: int) -> torch.onnx.ONNXProgram:
    """``torch.onnx.export(program, args, dynamo=True, custom_translation_table=table,
    opset_version=opset, optimize=False)`` with the given names, its registry reused."""
    core = _core()
    if core is None:
        return torch.onnx.export(program, args, dynamo=True, input_names=list(input_names),
                                 output_names=list(output_names), custom_translation_table=table,
                                 opset_version=opset, optimize=False, verbose=False, report=False)
    return core.export(program, args, None, registry=registry(table, opset), dynamic_shapes={},
                       input_names=list(input_names), output_names=list(output_names), report=False,
                       verify=False, profile=False, dump_exported_program=False, verbose=False,
                       optimize=False, opset_version=opset)


def registry(table: dict[Any, Callable], opset: int) -> Any:
    """torchlib's registry at ``opset`` (torchlib's own opset where it is lower, as torch.onnx
    does) with ``table``'s translations registered: built on first use, then shared while the
    same op libraries are loaded."""
    from torch.onnx._internal.exporter import _constants, _registration

    registry_opset = max(opset, _constants.TORCHLIB_OPSET)
    # torchlib registers a library's ops (torchvision's roi_align) only once the library is loaded
    key = (registry_opset, tuple(table.items()), frozenset(torch.ops.loaded_libraries))
    with _LOCK:
        found = _REGISTRIES.get(key)
        if found is None:
            found = _registration.ONNXRegistry.from_torchlib(opset_version=registry_opset)
            for op, translation in table.items():
                found.register_op(op, translation, is_complex=False)
            _REGISTRIES[key] = found
        return found


def _core() -> Any:
    """torch.onnx's exporter core, where its ``export`` takes a registry; else None."""
    try:
        from torch.onnx._internal.exporter import _constants, _core, _registration
    except ImportError:
        return None
    export = getattr(_core, "export", None)
    if export is None or not hasattr(_registration.ONNXRegistry, "from_torchlib") \
            or not hasattr(_constants, "TORCHLIB_OPSET"):
        return None
    return _core if _CORE_ARGUMENTS <= set(inspect.signature(export).parameters) else None
