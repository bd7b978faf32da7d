"""ncnn lowering through pnnx: trace the engine part at one image, convert it, check the layers.

ncnn blobs have no batch axis: the executor runs the net once per image and stacks the results,
which is exact for batch-independent models (the verification after lowering runs the example
batch and would catch a model that mixes images). The engine part is traced at batch 1. Other
dims (an image's height and width) may be dynamic too: pnnx is then given a second input shape
(``inputshape2``) so that it keeps those sizes symbolic, and the verification at the min, opt and
max sizes catches a graph that baked one in.
After ``host_postprocess_split``, only the head goes to ncnn; the tail is scripted to
``host_tail.pt`` and runs on the host with the reference NMS kernel.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import torch

from fxdeploy.dims import finite_or
from fxdeploy.errors import LoweringError
from fxdeploy.jit_warnings import quiet_jit
from fxdeploy.lowering.torchscript import script_graph, trace_graph
from fxdeploy.passes.host_postprocess_split import split_parts

logger = logging.getLogger(__name__)

PARAM, BIN, TAIL = "model.ncnn.param", "model.ncnn.bin", "host_tail.pt"
MAX_RANK = 4  # an ncnn Mat holds at most w, h, d, c per image
OUTPUT_DTYPES = (torch.float32, torch.float16, torch.int64, torch.int32, torch.bool)


def lower_ncnn(
    gm: torch.fx.GraphModule,
    example_inputs: list[torch.Tensor],
    input_names: list[str],
    output_names: list[str],
    out_dir: Path,
    *,
    fp16: bool,
) -> tuple[list[str], dict[str, Any]]:
    """Write param/bin (and host_tail.pt after a split); return the files and the blob map."""
    parts = split_parts(gm)
    head = parts.head if parts else gm
    head_inputs = parts.head_inputs if parts else list(range(len(example_inputs)))
    batch = _batch_symbol(head, [input_names[i] for i in head_inputs])
    head_outputs = _head_outputs(head, batch, output_names if parts is None else None)
    per_image = [example_inputs[i][:1] for i in head_inputs]
    try:
        traced = trace_graph(head, per_image, target="ncnn")
    except LoweringError as exc:
        if batch.isdigit() and int(batch) > 1:
            raise LoweringError(
                f"{exc}\n  ncnn runs one image at a time, so the graph is traced at batch 1, and this "
                f"graph has its batch fixed at {batch}; lower it with a dynamic batch "
                "(dynamic_shapes={<input>: {0: 'batch'}})"
            ) from exc
        raise
    second = _second_shapes(head)
    _convert(traced, per_image, out_dir, fp16=fp16, second=second)
    check_layers(out_dir / PARAM, dynamic_sizes=second is not None)
    _check_blobs(out_dir / PARAM, len(head_inputs), len(head_outputs))
    files = [PARAM, BIN]
    info: dict[str, Any] = {
        "inputs": [{"name": input_names[i], "blob": f"in{k}"} for k, i in enumerate(head_inputs)],
        "head_outputs": head_outputs,
        "host_tail": None,
        "tail_inputs": [],
        "outputs": [["head", k] for k in range(len(head_outputs))],
    }
    if parts is not None:
        tail = script_graph(parts.tail, target="ncnn host tail")
        with quiet_jit():
            tail.save(str(out_dir / TAIL))
        files.append(TAIL)
        info.update(
            host_tail=TAIL,
            tail_inputs=[list(s) for s in parts.tail_inputs],
            outputs=[list(s) for s in parts.outputs],
        )
    return files, info


def _batch_symbol(head: torch.fx.GraphModule, names: list[str]) -> str:
    """The one symbol (or static size) that dim 0 of every engine input shares."""
    placeholders = [n for n in head.graph.nodes if n.op == "placeholder"]
    symbols: set[str] = set()
    for name, node in zip(names, placeholders, strict=True):
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor) or value.dim() == 0:
            raise LoweringError(f"ncnn: input {name!r} has no batch dim (shape {_shape(value)})")
        if value.dtype != torch.float32:
            raise LoweringError(
                f"ncnn: input {name!r} must be float32 (ncnn blobs are float), got {value.dtype}"
            )
        _check_rank(f"input {name!r}", value)
        symbols.add(str(value.shape[0]))
    if len(symbols) > 1:
        raise LoweringError(f"ncnn: inputs {names} must share dim 0 (the batch), got sizes {sorted(symbols)}")
    return symbols.pop()


def _head_outputs(head: torch.fx.GraphModule, batch: str, names: list[str] | None) -> list[dict[str, Any]]:
    output = next(n for n in head.graph.nodes if n.op == "output")
    specs: list[dict[str, Any]] = []
    for k, node in enumerate(output.args[0]):
        label = f"output {names[k]!r}" if names else f"engine output #{k} ({node.name})"
        value = node.meta.get("val")
        if node.op == "placeholder":
            raise LoweringError(f"ncnn: {label} is an input returned unchanged; return a copy")
        if not isinstance(value, torch.Tensor) or value.dim() == 0 or str(value.shape[0]) != batch:
            raise LoweringError(
                f"ncnn: {label} must have the batch ({batch}) as dim 0, since ncnn runs one image at "
                f"a time; got shape {_shape(value)}"
            )
        _check_rank(label, value)
        if value.dtype not in OUTPUT_DTYPES:
            raise LoweringError(f"ncnn: {label} has dtype {value.dtype}; supported: {OUTPUT_DTYPES}")
        specs.append({
            "blob": f"out{k}",
            "shape": [-1 if isinstance(d, torch.SymInt) else int(d) for d in value.shape[1:]],
            "dtype": str(value.dtype).removeprefix("torch."),
        })
    return specs


def _check_rank(label: str, value: torch.Tensor) -> None:
    if value.dim() - 1 > MAX_RANK:
        raise LoweringError(
            f"ncnn: {label} has rank {value.dim()}; ncnn holds at most {MAX_RANK} dims per image"
        )


def _second_shapes(head: torch.fx.GraphModule) -> list[list[int]] | None:
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


def _convert(
    traced: torch.jit.ScriptModule, inputs: list[torch.Tensor], out_dir: Path, *, fp16: bool,
    second: list[list[int]] | None = None,
) -> None:
    """Run the pnnx executable; its by-products (pnnx.param, _pnnx.py, ...) stay in a temp dir."""
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
        result = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=600)
        if result.returncode != 0 or not (work / PARAM).is_file() or not (work / BIN).is_file():
            log = (result.stdout + result.stderr).strip().splitlines()[-15:]
            custom = _non_aten_ops(traced)
            if second is not None and not custom:
                raise LoweringError(
                    f"ncnn: pnnx failed (exit code {result.returncode}) re-running the traced graph at a second "
                    f"input size {second} to keep the height/width dynamic:\n  " + "\n  ".join(log)
                    + "\n  The trace fixed a size there: torch.jit.trace records a size that an aten op computes "
                    "as a constant. To fix: lower for ncnn with only the batch dynamic "
                    "(dynamic_shapes={<input>: {0: 'batch'}}), once per input size you serve"
                )
            suspects = f"op(s) {', '.join(custom)}" if custom else "the op named in pnnx's log above"
            raise LoweringError(
                f"ncnn: pnnx failed (exit code {result.returncode}) converting the traced graph:\n  "
                + "\n  ".join(log)
                + f"\n  To fix: replace {suspects} before capture with @fxdeploy.substitute (a tensor-only "
                "version built from aten ops), or choose another target (fxdeploy check-env lists them)"
            )
        for name in (PARAM, BIN):
            shutil.move(str(work / name), str(out_dir / name))


def _non_aten_ops(traced: torch.jit.ScriptModule) -> list[str]:
    """Ops outside aten/prim in the traced graph: custom ops, which pnnx has no converter for."""
    kinds = {node.kind() for node in traced.inlined_graph.nodes()}
    return sorted(k for k in kinds if k.split("::", 1)[0] not in ("aten", "prim", "quantized"))


def check_layers(param: Path, *, dynamic_sizes: bool = False) -> None:
    """pnnx writes ops it cannot convert under their torch names; ncnn cannot create those."""
    lines = param.read_text().splitlines()[2:]
    types = {line.split()[0]: line.split()[1] for line in reversed(lines) if line.strip()}
    unknown = {t: n for t, n in types.items() if not _ncnn_has(t)}
    if unknown:
        listed = ", ".join(f"{t} (layer {n})" for t, n in sorted(unknown.items()))
        static = (
            "; or lower for ncnn with only the batch dynamic (dynamic_shapes={<input>: {0: 'batch'}}), since "
            "sizes computed from a dynamic height/width often leave such ops" if dynamic_sizes else ""
        )
        raise LoweringError(
            f"ncnn: pnnx left op(s) that ncnn cannot run: {listed}. Replace them before capture "
            f"with @fxdeploy.substitute, or use another target{static}"
        )


def _check_blobs(param: Path, inputs: int, outputs: int) -> None:
    """pnnx names graph inputs in0.. and outputs out0.. in order; the executor relies on that."""
    blobs: set[str] = set()
    for line in param.read_text().splitlines()[2:]:
        fields = line.split()  # type name bottom_count top_count bottoms... tops... key=value...
        if len(fields) >= 4:
            blobs.update(fields[4 : 4 + int(fields[2]) + int(fields[3])])
    expected = [f"in{k}" for k in range(inputs)] + [f"out{k}" for k in range(outputs)]
    missing = [blob for blob in expected if blob not in blobs]
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


def _shape(value: Any) -> str:
    return str(list(value.shape)) if isinstance(value, torch.Tensor) else type(value).__name__
