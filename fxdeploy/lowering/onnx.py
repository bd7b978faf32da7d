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

import torch

from fxdeploy.artifact import true_guards
from fxdeploy.errors import LoweringError
from fxdeploy.passes.graph_utils import call_site
from fxdeploy.settings import Settings

_QUIET = ("torchvision is not installed", "isinstance(treespec, LeafSpec)")
_QUIET_LOGGERS = (
    "torch.onnx._internal.exporter._registration",  # "torchvision is not installed. Skipping ..."
    "onnxscript.optimizer._constant_folding",  # "Skipping constant folding for op Split ..."
    "torch.onnx._internal.exporter._core",  # "Tensor ... is not one of the initializers" (a tensor attribute)
    "onnx_ir._convenience",  # "Attribute type is ambiguous because it is an empty sequence" (index_put's)
    "onnx_ir.passes.common.initializer_deduplication",  # "Skipped deduplication of initializer" (a constant output)
)


UNOPTIMIZED_PRECISIONS = frozenset({"bf16"})
"""onnxscript 0.7's optimizer mis-types bf16 graphs: its batch-norm fusion writes fp32 weights into a
bf16 Conv, and OpenVINO then refuses the model (bf16 data, f32 filters). Runtimes fold batch norms
themselves, so these precisions export unoptimized (ResNet-50 on OpenVINO: the same speed)."""


def export_onnx(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[torch.Tensor],
    input_names: Sequence[str],
    output_names: Sequence[str],
    dynamic_shapes: Sequence[dict[int, Any] | None],
    settings: Settings,
    *,
    opset: int,
    flavour: str = "standard",
    program: torch.export.ExportedProgram | None = None,
) -> torch.onnx.ONNXProgram:
    """Export the (already passed) graph to an ONNX program at ``opset`` and the configured IR version.

    ``program`` is capture's ExportedProgram, given when no pass changed the graph: it is the same
    graph, so it is exported as is instead of being traced again. The model is not run through
    ``onnx.checker`` here: that serializes a second copy of every weight, and each runtime checks
    the model when it loads it, which ``lower()`` does right after.
    """
    from fxdeploy.lowering.onnx_optimize import optimize
    from fxdeploy.lowering.onnx_translations._common import dim_bounds

    args = tuple(example_inputs)
    try:
        with _quiet_exporter():
            if program is None:
                with _without_custom_meta(gm):
                    program = _exported(gm, args, tuple(dynamic_shapes))
            with dim_bounds(_upper_bounds(program)):
                onnx_program = _export(program, args, input_names, output_names, flavour, opset)
            if settings.onnx.optimize and settings.precision not in UNOPTIMIZED_PRECISIONS:
                optimize(onnx_program)
    except Exception as exc:
        raise LoweringError(_explain(exc, gm)) from exc
    model = onnx_program.model
    model.ir_version = min(model.ir_version, settings.onnx.ir_version)
    _number_tie_free(model)
    return onnx_program


def _exported(gm: torch.fx.GraphModule, args: tuple[Any, ...], shapes: tuple[Any, ...]) -> torch.export.ExportedProgram:
    """torch.export of the passed graph; where it reports only guards that hold at every declared
    size (``true_guards``, as capture found: a ceil-mode pool's), once more with them kept as
    runtime asserts, true at every size."""
    try:
        return torch.export.export(gm, args, dynamic_shapes=shapes, strict=False)
    except Exception as exc:
        if not true_guards.all_hold(exc, shapes):
            raise
    return torch.export.export(gm, args, dynamic_shapes=shapes, strict=False,
                               prefer_deferred_runtime_asserts_over_guards=True)


def _number_tie_free(model: Any) -> None:
    """multiclass_nms's translation names its tie-free TopKs' outputs by object id, unique while it
    exports (``TIE_FREE``); they are numbered in graph order instead, so that one program always
    exports the same bytes."""
    from onnx_ir.traversal import RecursiveGraphIterator

    from fxdeploy.artifact.onnx_files import TIE_FREE

    count = 0
    for node in RecursiveGraphIterator(model.graph):
        for value in node.outputs:
            if value.name and value.name.startswith(TIE_FREE + "_"):
                role = value.name[len(TIE_FREE) + 1:].rsplit("_", 1)[0]
                value.name, count = f"{TIE_FREE}_{role}_{count}", count + 1


@contextlib.contextmanager
def _without_custom_meta(gm: torch.fx.GraphModule) -> Any:
    """``gm`` without the custom metadata capture left on its nodes, restored after: exporting the
    graph again records its own, and torch.export asserts where they differ (GPT-2's inputs carry
    ``_torchdynamo_disable_method`` from a function transformers keeps from dynamo)."""
    kept = {node: node.meta.pop("custom") for node in gm.graph.nodes if "custom" in node.meta}
    try:
        yield
    finally:
        for node, custom in kept.items():
            node.meta["custom"] = custom


def _upper_bounds(program: torch.export.ExportedProgram) -> dict[str, int]:
    """Each symbolic dim's finite upper bound (the ``dynamic_shapes`` maxima), by symbol name."""
    bounds = {}
    for symbol, ranges in program.range_constraints.items():
        if getattr(ranges.upper, "is_Integer", False):  # not int_oo (unbounded)
            bounds[str(symbol)] = int(ranges.upper)
    return bounds


def _export(program: torch.export.ExportedProgram, args: tuple[Any, ...], input_names: Sequence[str],
            output_names: Sequence[str], flavour: str, opset: int) -> torch.onnx.ONNXProgram:
    from fxdeploy.lowering.onnx_registry import export_program
    from fxdeploy.lowering.onnx_translations import translation_table

    return export_program(program, args, input_names, output_names, translation_table(flavour), opset)


def save_onnx(program: torch.onnx.ONNXProgram, path: Path, settings: Settings) -> list[str]:
    """Write ``path``, and its weights to ``<name>.data`` when they reach ``onnx.external_data_mib``.

    External weights are written straight from the exporter's tensors, while an inline file is
    first built as one protobuf holding a copy of every weight, then serialized into a second one.
    """
    size = sum(v.const_value.nbytes for v in program.model.graph.initializers.values() if v.const_value is not None)
    program.save(path, external_data=size >= settings.onnx.external_data_mib * 2**20)
    data = path.with_name(path.name + ".data")
    return [path.name, data.name] if data.exists() else [path.name]


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NODE = re.compile(r"translating node %(\w+)")
_ADVICE = (
    "  An op without an ONNX translation can be given one in fxdeploy.lowering.onnx_translations, "
    "or replaced before capture with @fxdeploy.substitute."
)


def _explain(exc: Exception, gm: torch.fx.GraphModule | None = None) -> str:
    """The root cause of a torch.onnx failure, the node and the user's source line where known,
    without the exporter's colour codes and its "create an issue" banner."""
    chain = [exc]
    while chain[-1].__cause__ is not None and len(chain) < 20:
        chain.append(chain[-1].__cause__)
    text = "\n".join(_ANSI.sub("", str(e)) for e in chain)
    match = _NODE.search(text)
    node = next((n for n in gm.graph.nodes if n.name == match.group(1)), None) if gm and match else None
    root = _ANSI.sub("", str(chain[-1])).strip()
    if "## Exception summary" in root:  # a torch.onnx error without a cause: its summary is the cause
        root = root.split("## Exception summary", 1)[1].strip()
    detail = root.splitlines()[0] if root else type(chain[-1]).__name__
    where = f" at {call_site(node)} (node {node.name}, {node.target})" if node is not None else ""
    from fxdeploy.passes.left_ops import why_left

    left = why_left(gm, node) if gm is not None and node is not None else None
    reason = f"\n  {left}" if left else ""
    return f"ONNX lowering failed{where}: {type(chain[-1]).__name__}: {detail[:500]}{reason}\n{_ADVICE}"


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
