"""ONNX lowering: torch.onnx's dynamo exporter plus fxdeploy's op translations."""

from __future__ import annotations

import contextlib
import io
import logging
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx
import torch

from fxdeploy.errors import LoweringError
from fxdeploy.settings import Settings

logger = logging.getLogger(__name__)

_QUIET = ("torchvision is not installed", "isinstance(treespec, LeafSpec)")
_QUIET_LOGGERS = (
    "torch.onnx._internal.exporter._registration",  # "torchvision is not installed. Skipping ..."
    "onnxscript.optimizer._constant_folding",  # "Skipping constant folding for op Split ..."
)


def export_onnx(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[torch.Tensor],
    input_names: Sequence[str],
    output_names: Sequence[str],
    dynamic_shapes: Sequence[dict[int, Any] | None],
    settings: Settings,
    *,
    flavour: str = "standard",
) -> onnx.ModelProto:
    """Export the (already passed) graph and return a checked ModelProto at the configured IR."""
    from fxdeploy.lowering.onnx_translations import translation_table

    args = tuple(example_inputs)
    try:
        with _quiet_exporter():
            ep = torch.export.export(gm, args, dynamic_shapes=tuple(dynamic_shapes), strict=False)
            program = torch.onnx.export(
                ep,
                args,
                dynamo=True,
                input_names=list(input_names),
                output_names=list(output_names),
                custom_translation_table=translation_table(flavour),
                opset_version=settings.onnx.opset,
                optimize=settings.onnx.optimize,
                verbose=False,
                report=False,
            )
    except Exception as exc:
        raise LoweringError(_explain(exc)) from exc
    model = program.model_proto
    model.ir_version = min(model.ir_version, settings.onnx.ir_version)
    _check(model)
    return model


def save_onnx(model: onnx.ModelProto, path: Path) -> list[str]:
    """Write the model; weights go to a side file only past protobuf's 2 GiB limit."""
    if model.ByteSize() < 2**31 - 2**20:
        path.write_bytes(model.SerializeToString())
        return [path.name]
    data = path.with_suffix(".data")
    onnx.save_model(model, str(path), save_as_external_data=True, location=data.name)
    return [path.name, data.name]


def _check(model: onnx.ModelProto) -> None:
    if model.ByteSize() >= 2**31 - 2**20:
        return
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        raise LoweringError(f"the exported ONNX model is invalid: {exc}") from exc


def _explain(exc: Exception) -> str:
    text = str(exc)
    marker = "No decompositions registered for"
    unsupported = [line.strip() for line in text.splitlines() if marker in line or "Unsupported FX nodes" in line]
    detail = unsupported[0] if unsupported else text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return (
        f"ONNX lowering failed: {type(exc).__name__}: {detail[:500]}\n"
        "  An op without an ONNX translation can be given one in fxdeploy.lowering.onnx_translations, "
        "or replaced before capture with @fxdeploy.substitute."
    )


@contextlib.contextmanager
def _quiet_exporter() -> Any:
    """The exporter prints progress and warns about torchvision; neither is news to a deployer."""
    loggers = [logging.getLogger(name) for name in _QUIET_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            for message in _QUIET:
                warnings.filterwarnings("ignore", message=f".*{re.escape(message)}.*")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
