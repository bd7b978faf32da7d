"""pnnx's half of the ncnn lowering: convert a traced engine stage to param/bin, then check that
pnnx converted every op (it writes the ones it cannot under their torch names) and named the
blobs in0.., out0.. as the plan expects.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fxdeploy.artifact.dims import finite_or
from fxdeploy.artifact.jit_warnings import quiet_jit
from fxdeploy.errors import DynamicSizesUnsupported, LoweringError

logger = logging.getLogger(__name__)

PARAM, BIN = "model.ncnn.param", "model.ncnn.bin"


def second_shapes(head: torch.fx.GraphModule) -> list[list[int]] | None:
    """Per-image input shapes at other sizes of the dynamic non-batch dims, for pnnx's inputshape2;
    None when only the batch is dynamic. Each such symbol doubles (or grows by one, or shrinks by
    one) within its range, and every input dim is evaluated at the new values."""
    values = [n.meta["val"] for n in head.graph.nodes if n.op == "placeholder"]
    rest = [d for v in values for d in v.shape[1:] if isinstance(d, torch.SymInt)]
    if not rest:
        return None
    env = rest[0].node.shape_env
    hints = getattr(env, "backed_var_to_val", None)  # torch 2.13's name; var_to_val before it
    hints = hints if hints is not None else env.var_to_val
    symbols = {sym for d in rest for sym in d.node.expr.free_symbols}
    new: dict[Any, int] = {}
    for sym in symbols:
        value, bounds = int(hints[sym]), env.var_to_range[sym]
        upper = finite_or(bounds.upper, 2 * value + 1)
        choices = [c for c in (2 * value, value + 1, value - 1) if int(bounds.lower) <= c <= upper and c > 0]
        new[sym] = choices[0] if choices else value
    return [
        [1, *(int(d.node.expr.subs(new)) if isinstance(d, torch.SymInt) else int(d) for d in v.shape[1:])]
        for v in values
    ]


def convert(
    traced: torch.jit.ScriptModule, inputs: list[torch.Tensor], out_dir: Path, *, fp16: bool,
    second: list[list[int]] | None = None, names: tuple[str, str] = (PARAM, BIN),
) -> str:
    """Run the pnnx executable; its by-products (_pnnx.py, ...) stay in a temp dir. Returns pnnx's
    own graph (``model.pnnx.param``), which keeps the attributes of the ops it did not convert."""
    import pnnx

    with tempfile.TemporaryDirectory(prefix="fxdeploy-pnnx-") as work_dir:
        work = Path(work_dir)
        with quiet_jit():
            traced.save(str(work / "model.pt"))
        shapes = ",".join("[" + ",".join(str(d) for d in x.shape) + "]f32" for x in inputs)
        command = [pnnx.EXEC_PATH, str(work / "model.pt"), f"inputshape={shapes}"]
        if second is not None:  # the dims that differ stay symbolic in pnnx's graph
            command.append("inputshape2=" + ",".join("[" + ",".join(map(str, s)) + "]f32" for s in second))
        command += [
            "device=cpu",
            f"fp16={int(fp16)}", f"ncnnparam={work / PARAM}", f"ncnnbin={work / BIN}",
        ]
        result = _run_pnnx(command, work)
        if result.returncode < 0:  # killed by a signal: pnnx has crashed (SIGSEGV) once in a few hundred runs
            logger.info("pnnx died of signal %d; running it once more", -result.returncode)
            result = _run_pnnx(command, work)
        if result.returncode != 0 or not (work / PARAM).is_file() or not (work / BIN).is_file():
            log = (result.stdout + result.stderr).strip().splitlines()[-15:]
            custom = _non_aten_ops(traced)
            if second is not None and not custom:
                raise DynamicSizesUnsupported(
                    f"ncnn: pnnx failed (exit code {result.returncode}) re-running the traced graph at a second "
                    f"input size {second} to keep the dims besides the batch dynamic:\n  " + "\n  ".join(log)
                    + "\n  The trace fixed a size there: torch.jit.trace records a size that an aten op computes "
                    "as a constant. lower() lowers again with those dims fixed at the example's (a DimWarning); "
                    "lower once per input size you serve, or use another target to keep them dynamic"
                )
            suspects = f"op(s) {', '.join(custom)}" if custom else "the op named in pnnx's log above"
            raise LoweringError(
                f"ncnn: pnnx failed (exit code {result.returncode}) converting the traced graph:\n  "
                + "\n  ".join(log)
                + f"\n  To fix: replace {suspects} before capture with @fxdeploy.substitute (a tensor-only "
                "version built from aten ops), or choose another target (fxdeploy check-env lists them)"
            )
        for made, name in zip((PARAM, BIN), names, strict=True):
            shutil.move(str(work / made), str(out_dir / name))
        own = work / "model.pnnx.param"
        return own.read_text() if own.is_file() else ""


PNNX_TIMEOUT_S = 600
"""How long one pnnx run may take before it counts as hung and is stopped."""


def _run_pnnx(command: list[str], work: Path) -> subprocess.CompletedProcess[str]:
    """pnnx's run; a hang (subprocess kills it at the timeout) is a LoweringError saying so."""
    try:
        return subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=PNNX_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise LoweringError(
            f"ncnn: pnnx did not finish converting the traced graph in {PNNX_TIMEOUT_S} s and was stopped: it hangs "
            "on some graphs (a cat with an empty input did before fxdeploy removed those). Choose another target "
            "(fxdeploy check-env lists them), and report the model"
        ) from exc


def _non_aten_ops(traced: torch.jit.ScriptModule) -> list[str]:
    """Ops outside aten/prim in the traced graph: custom ops, which pnnx has no converter for."""
    kinds = {node.kind() for node in traced.inlined_graph.nodes()}
    return sorted(k for k in kinds if k.split("::", 1)[0] not in ("aten", "prim", "quantized"))


@dataclass(frozen=True)
class Layer:
    """One layer of an ncnn param: its type, name, and the blobs it reads and writes."""

    kind: str
    name: str
    bottoms: tuple[str, ...]
    tops: tuple[str, ...]


class UnconvertedLayers(LoweringError):
    """pnnx left layers ncnn cannot create; the lowering may run their ops on the host instead.
    ``layers`` are those layers, ``graph`` all of the param's; the lowering adds the engine stage
    it converted (``module``) and pnnx's own graph of it (``pnnx_graph``)."""

    def __init__(self, message: str, layers: list[Layer], graph: list[Layer]) -> None:
        super().__init__(message)
        self.layers, self.graph = layers, graph
        self.module: torch.fx.GraphModule | None = None
        self.pnnx_graph = ""


def layers(param: Path) -> list[Layer]:
    result = []
    for line in param.read_text().splitlines()[2:]:
        fields = line.split()  # type name bottom_count top_count bottoms... tops... key=value...
        if len(fields) >= 4:
            bottoms, tops = int(fields[2]), int(fields[3])
            result.append(Layer(fields[0], fields[1], tuple(fields[4:4 + bottoms]),
                                tuple(fields[4 + bottoms:4 + bottoms + tops])))
    return result


def check_layers(param: Path, *, dynamic_sizes: bool = False) -> None:
    """pnnx writes ops it cannot convert under their torch names; ncnn cannot create those."""
    graph = layers(param)
    unknown = [layer for layer in graph if not _ncnn_has(layer.kind)]
    if unknown:
        first = {layer.kind: layer.name for layer in reversed(unknown)}
        listed = ", ".join(f"{kind} (layer {name})" for kind, name in sorted(first.items()))
        static = (
            "; or lower for ncnn with only the batch dynamic (dynamic_shapes={<input>: {0: 'batch'}}), since "
            "sizes computed from a dynamic height/width often leave such ops" if dynamic_sizes else ""
        )
        raise UnconvertedLayers(
            f"ncnn: pnnx left op(s) that ncnn cannot run: {listed}. Replace them before capture "
            f"with @fxdeploy.substitute, or use another target{static}",
            unknown, graph,
        )


class InputPassedThrough(LoweringError):
    """pnnx wrote an engine input straight to an output: the engine stage computes nothing from it."""


def check_blobs(param: Path, inputs: int, outputs: int) -> None:
    """pnnx names graph inputs in0.. and outputs out0.. in order; the executor relies on that."""
    graph = layers(param)
    blobs = {blob for layer in graph for blob in (*layer.bottoms, *layer.tops)}
    expected = [f"in{k}" for k in range(inputs)] + [f"out{k}" for k in range(outputs)]
    missing = [blob for blob in expected if blob not in blobs]
    through = {layer.name: layer.tops for layer in graph if layer.kind == "Input" and layer.name in missing}
    if through:  # a stage whose output copies its input: pnnx names the Input layer's blob as the output
        passed = ", ".join(f"{name} to {', '.join(tops)}" for name, tops in through.items())
        raise InputPassedThrough(f"ncnn: pnnx wrote no layer that reads the engine's input ({passed}, unchanged): "
                                 "the engine stage computes nothing from it")
    if missing:
        raise LoweringError(
            f"ncnn: pnnx produced no blob(s) {missing} (an unused input, or an output returned twice?); "
            f"expected in0..in{inputs - 1} and out0..out{outputs - 1}"
        )


def _ncnn_has(layer_type: str) -> bool:
    if any(mark in layer_type for mark in (".", "::")):
        return False
    try:
        import ncnn
    except ImportError:
        return True
    return ncnn.layer_to_index(layer_type) >= 0
