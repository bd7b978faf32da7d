"""Ops pnnx leaves unconverted run on the host: find the graph's nodes behind each layer ncnn
cannot create, cut again with them on the host, and lower again.

pnnx writes an op it has no ncnn converter for under its TorchScript-level name: ``aten::erfinv``,
``torch.eq``, ``Tensor.index_put``, ``Tensor.to``. The name after the namespace is the aten op
the traced engine stage called (``to`` is a ``_to_copy``), so every node of that op in the stage
goes to the host, with the reason and its source line, which the plan and the report show.
``pnnx.Expression`` is pnnx's fusion of elementwise and size arithmetic: one that feeds another
unconverted layer goes with it; one that stands alone names its ops in its ``expr`` (in pnnx's
own graph), and the nodes of those ops go. Bounded: at most ``ROUNDS`` rounds, and at most
``Settings.ncnn.max_host_ops`` nodes moved; past either, and where no node is found, the
lowering refuses with pnnx's layers named.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch

from fxdeploy.errors import DynamicSizesUnsupported, LoweringError
from fxdeploy.lowering.ncnn_bisect import ValuesDiffer
from fxdeploy.lowering.ncnn_convert import Layer, UnconvertedLayers
from fxdeploy.partition.recut import origin, recut
from fxdeploy.passes.graph_utils import call_site
from fxdeploy.settings import Settings

T = TypeVar("T")
ROUNDS = 6
EXPRESSION = "pnnx.Expression"
NO_LAYER = "pnnx has no ncnn layer for "
"""How a moved node's reason starts; the pnnx layer type and the source line follow."""
_ALIASES = {"to": ("_to_copy",), "type_as": ("_to_copy",), "expand": ("expand_as",), "max": ("amax",),
            "min": ("amin",), "view": ("_unsafe_view",), "reshape": ("_unsafe_view", "view")}
"""pnnx's name for an op -> more aten ops it may stand for (``.float()`` is a ``_to_copy`` after export)."""
_ARITHMETIC = frozenset({"size", "add", "sub", "mul", "div", "neg", "rsub", "int", "float"})
"""Functions of a ``pnnx.Expression`` that name no op of their own: every graph has them."""


def lower_with_host_fallback(
    gm: torch.fx.GraphModule, lower: Callable[[torch.fx.GraphModule], T], out_dir: Path, settings: Settings,
) -> tuple[T, dict[str, str]]:
    """``lower(gm)``, with the nodes behind layers pnnx left unconverted, and the first op whose
    values the engine gets wrong (``ncnn_bisect``), moved to the host until it converts and gives
    PyTorch's values. Returns its result and the nodes moved (name -> reason)."""
    limit = settings.ncnn.max_host_ops
    moved: dict[str, str] = {}
    first: LoweringError | None = None
    for _ in range(ROUNDS):
        try:
            return lower(gm), moved
        except (UnconvertedLayers, ValuesDiffer) as exc:
            first = first or exc
            found, unmapped = nodes_behind(exc) if isinstance(exc, UnconvertedLayers) else (exc.nodes, [])
            new = {name: why for name, why in found.items() if name not in moved}
            if isinstance(exc, ValuesDiffer) and not new:
                raise  # no op found to differ, or it differs on the host too: the engine's own words
            if unmapped or not new:
                raise LoweringError(f"{exc}\n  {_why_not(unmapped, found)}") from exc
            if len(moved) + len(new) > limit:
                raise LoweringError(
                    f"{exc}\n  Running them on the host would take {len(moved) + len(new)} op(s) there "
                    f"({', '.join(sorted({*moved, *new}))}), more than Settings.ncnn.max_host_ops ({limit}); "
                    "raise it (--ncnn-max-host-ops) to run them on the host"
                ) from exc
            moved.update(new)
            _clear(out_dir)
            try:
                gm = recut(gm, moved, settings)
            except KeyError as missing:  # an op the lowering itself added to the stage (a cast, a permute)
                raise LoweringError(f"{exc}\n  it is the lowering's own op, which cannot move: {missing}") from exc
        except DynamicSizesUnsupported:  # lower() fixes the sizes and starts over
            raise
        except LoweringError as exc:
            if first is None:
                raise
            raise LoweringError(f"{first}\n  With {', '.join(sorted(moved))} on the host instead, the "
                                f"lowering failed: {exc}") from exc
    raise LoweringError(f"ncnn: pnnx still left ops unconverted after {ROUNDS} rounds of moving them to the "
                        f"host ({', '.join(sorted(moved))}); use another target")


def nodes_behind(exc: UnconvertedLayers) -> tuple[dict[str, str], list[str]]:
    """The stage's nodes behind each unconverted layer (name -> reason), and the layers behind which
    no node was found."""
    stage = exc.module
    if stage is None:
        return {}, [f"{layer.kind} (layer {layer.name})" for layer in exc.layers]
    unknown = {layer.name for layer in exc.layers}
    found: dict[str, str] = {}
    unmapped: list[str] = []
    for layer in exc.layers:
        if layer.kind == EXPRESSION and _feeds(layer, exc.graph, unknown - {layer.name}):
            continue  # it goes with the layer it feeds
        names = _expression_ops(exc.pnnx_graph, layer) if layer.kind == EXPRESSION else _aten_names(layer.kind)
        nodes = [n for n in stage.graph.nodes if n.op == "call_function" and _op_name(n) in names]
        if not nodes:
            unmapped.append(f"{layer.kind} (layer {layer.name})")
        for node in nodes:
            found.setdefault(origin(node), f"{NO_LAYER}{layer.kind} ({call_site(node)})")
    return found, unmapped


def _feeds(layer: Layer, graph: list[Layer], others: set[str]) -> bool:
    """Whether ``layer``'s output reaches another unconverted layer (through ncnn's Split copies)."""
    blobs, seen = set(layer.tops), set()
    while blobs - seen:
        seen |= blobs
        readers = [other for other in graph if set(other.bottoms) & blobs]
        if any(reader.name in others for reader in readers):
            return True
        blobs = {top for reader in readers if reader.kind == "Split" for top in reader.tops}
    return False


def _expression_ops(pnnx_graph: str, layer: Layer) -> set[str]:
    """The ops a ``pnnx.Expression`` names in its ``expr`` (pnnx's own graph keeps it), bar arithmetic."""
    line = next((row for row in pnnx_graph.splitlines() if len(row.split()) > 1 and row.split()[1] == layer.name), "")
    expr = re.search(r"expr=(\S+)", line)
    functions = set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\(", expr.group(1))) if expr else set()
    return {name for function in functions - _ARITHMETIC for name in _aten_names(function)}


def _aten_names(kind: str) -> set[str]:
    """The aten ops a pnnx layer type may stand for: ``torch.eq`` -> eq; ``aten::_to_copy`` -> _to_copy."""
    name = kind.split("::")[-1].split(".")[-1]
    return {name, name.lstrip("_"), f"_{name}", *_ALIASES.get(name, ())}


def layer_kinds(moved: dict[str, str]) -> list[str]:
    """The pnnx layer types behind the moved nodes' reasons."""
    return sorted({why.removeprefix(NO_LAYER).split(" (")[0] for why in moved.values()})


def _op_name(node: torch.fx.Node) -> str:
    packet = getattr(node.target, "overloadpacket", None)
    return str(packet).split(".")[-1] if packet is not None else getattr(node.target, "__name__", "")


def _why_not(unmapped: list[str], found: dict[str, str]) -> str:
    if unmapped:
        return (f"fxdeploy found no node of the graph behind {', '.join(unmapped)}, so it cannot run them on the "
                "host instead")
    return f"they stayed unconverted with {', '.join(sorted(found))} on the host already"


def _clear(out_dir: Path) -> None:
    """Files of a round that failed: the next round writes its own stages."""
    for path in out_dir.iterdir():
        if path.name.endswith((".ncnn.param", ".ncnn.bin")) or (path.name.startswith("host.") and path.suffix == ".pt"):
            path.unlink() if path.is_file() else shutil.rmtree(path)
