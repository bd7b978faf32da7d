"""ncnn lowering through pnnx: trace the engine part at one image, convert it, check the layers.

ncnn blobs have no batch axis: the executor runs the net once per image and stacks the results,
which is exact for batch-independent models (the verification after lowering runs the example
batch and would catch a model that mixes images). The engine part is traced at batch 1. Other
dims (an image's height and width) may be dynamic too: pnnx is then given a second input shape
(``inputshape2``) so that it keeps those sizes symbolic, and the verification at the min, opt and
max sizes catches a graph that baked one in.
After ``host_postprocess_split``, each engine stage goes to ncnn (``model.ncnn.param`` for the
first, ``model.<stage>.ncnn.param`` for one after a host stage), and each host stage is scripted
to ``host.<stage>.pt`` and runs on the host (NMS with the reference kernel).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from fxdeploy.dims import finite_or
from fxdeploy.errors import LoweringError
from fxdeploy.jit_warnings import quiet_jit
from fxdeploy.lowering.torchscript import script_graph, trace_graph
from fxdeploy.partition import Source, Stage, split_parts
from fxdeploy.passes.graph_utils import call_site

PARAM, BIN = "model.ncnn.param", "model.ncnn.bin"
MAX_RANK = 4  # an ncnn Mat holds at most w, h, d, c per image
OUTPUT_DTYPES = (torch.float32, torch.float16, torch.int64, torch.int32, torch.bool)


def engine_files(stage: int) -> tuple[str, str]:
    """The first engine keeps pnnx's usual names; a later one (after a host stage) is numbered."""
    return (PARAM, BIN) if stage == 0 else (f"model.{stage}.ncnn.param", f"model.{stage}.ncnn.bin")


def lower_ncnn(
    gm: torch.fx.GraphModule,
    example_inputs: list[torch.Tensor],
    input_names: list[str],
    output_names: list[str],
    out_dir: Path,
    *,
    fp16: bool,
) -> tuple[list[str], dict[str, Any]]:
    """Write each stage's files (param/bin per engine stage, a script per host stage); return the
    files and the plan the executor follows."""
    parts = split_parts(gm)
    if parts is None:
        stages = [Stage("engine", gm, [("input", i) for i in range(len(example_inputs))])]
        outputs: list[Source] = [(0, k) for k in range(len(output_names))]
    else:
        stages, outputs = parts.stages, parts.outputs
    batch = _graph_batch(gm)
    values: dict[Source, torch.Tensor] = {("input", i): x for i, x in enumerate(example_inputs)}
    files: list[str] = []
    plan: list[dict[str, Any]] = []
    for s, stage in enumerate(stages):
        args = [values[source] for source in stage.inputs]
        if _is_empty(stage):
            plan.append({"kind": "empty", "sources": []})
            continue
        if stage.kind == "engine":
            labels = [input_names[i] if part == "input" and s == 0 else f"stage {s} input #{k}"
                      for k, (part, i) in enumerate(stage.inputs)]
            names = output_names if parts is None else None
            entry = _lower_engine(stage.module, args, labels, names, out_dir, engine_files(s), fp16=fp16, batch=batch)
        else:
            entry = {"file": f"host.{s}.pt", "ops": _ops(stage.module)}  # the report lists them
            with quiet_jit():
                script_graph(stage.module, target="ncnn host stage").save(str(out_dir / entry["file"]))
        files += [entry[key] for key in ("param", "bin", "file") if key in entry]
        plan.append({"kind": stage.kind, **entry, "sources": [list(source) for source in stage.inputs]})
        if s + 1 < len(stages):  # example values for the stages after it
            with torch.no_grad():
                results = stage.module(*args)
            values.update(((s, k), value) for k, value in enumerate(results))
    return files, {"stages": plan, "outputs": [list(source) for source in outputs]}


def _ops(module: torch.fx.GraphModule) -> list[str]:
    """The ops a host stage runs, each once, in graph order (``aten.topk.default``)."""
    names = [str(n.target) for n in module.graph.nodes if n.op == "call_function" and "getitem" not in str(n.target)]
    return list(dict.fromkeys(names))


def _is_empty(stage: Stage) -> bool:
    """An engine stage with no work: the split moved all of it into a later one."""
    nodes = list(stage.module.graph.nodes)
    output = next(n for n in nodes if n.op == "output")
    return not stage.inputs and not output.args[0] and not any(n.op == "call_function" for n in nodes)


def _lower_engine(
    module: torch.fx.GraphModule, args: list[torch.Tensor], labels: list[str], output_names: list[str] | None,
    out_dir: Path, names: tuple[str, str], *, fp16: bool, batch: str | None = None,
) -> dict[str, Any]:
    """Trace one engine stage at one image, convert it with pnnx, and check what ncnn can run."""
    shared = _shared_inputs(module, batch) if batch is not None else []
    if shared:
        module = _with_leading_one(module, shared)
        args = [x[None] if k in shared else x for k, x in enumerate(args)]
    batch = _batch_symbol(module, labels, shared)
    outputs = _head_outputs(module, batch, output_names)
    per_image = [x[:1] for x in args]
    try:
        traced = trace_graph(module, per_image, target="ncnn")
    except LoweringError as exc:
        if batch.isdigit() and int(batch) > 1:
            raise LoweringError(
                f"{exc}\n  ncnn runs one image at a time, so the graph is traced at batch 1, and this "
                f"graph has its batch fixed at {batch}; lower it with a dynamic batch "
                "(dynamic_shapes={<input>: {0: 'batch'}})"
            ) from exc
        raise
    second = _second_shapes(module)
    _convert(traced, per_image, out_dir, fp16=fp16, second=second, names=names)
    check_layers(out_dir / names[0], dynamic_sizes=second is not None)
    _check_blobs(out_dir / names[0], len(args), len(outputs))
    with torch.no_grad():
        expected = [y.detach().float().numpy() for y in module(*per_image)]
    batched = _input_layout(out_dir, names, [x.numpy() for x in per_image], expected)
    return {
        "param": names[0], "bin": names[1],
        "blobs": [f"in{k}" for k in range(len(args))],
        "batched_inputs": batched,
        "shared_inputs": shared,
        "outputs": outputs,
    }


def _input_layout(out_dir: Path, names: tuple[str, str], inputs: list[Any], expected: list[Any]) -> bool:
    """How the engine takes its inputs, found by running it once on the example image.

    pnnx drops the batch axis of an operand when it can tell where the batch is (a convolution's
    input, an image); when it cannot (a stage that starts from [B, N, C] values a host stage
    gathered, with no such op behind them), it may keep the operand whole, with the batch as a
    leading 1, and then expects the input blob the same way. Returns False for per-image blobs,
    True for blobs that keep the leading 1; raises when neither gives PyTorch's values."""
    import ncnn
    import numpy as np

    net = ncnn.Net()
    net.opt.num_threads = 1
    net.opt.use_vulkan_compute = False
    net.opt.use_fp16_packed = net.opt.use_fp16_storage = net.opt.use_fp16_arithmetic = False
    net.opt.use_bf16_storage = False
    if net.load_param(str(out_dir / names[0])) or net.load_model(str(out_dir / names[1])):
        raise LoweringError(f"ncnn: cannot load the {names[0]} pnnx wrote")
    problems = []
    for batched in (False, True):
        arrays = [np.ascontiguousarray(x if batched else x[0]) for x in inputs]
        if any(a.ndim > 4 for a in arrays):  # ncnn.Mat raises a raw RuntimeError past 4 dims
            problems.append(f"{'with' if batched else 'without'} the batch axis: an input of "
                            f"{max(a.ndim for a in arrays)} dims, and ncnn's Mat holds at most 4 (c, d, h, w)")
            continue
        extractor = net.create_extractor()
        mats = [ncnn.Mat(a).clone() for a in arrays]
        for k, mat in enumerate(mats):
            extractor.input(f"in{k}", mat)
        got = [extractor.extract(f"out{k}") for k in range(len(expected))]
        errors = [
            "missing" if code != 0 else "size" if np.array(mat).size != want.size
            else float(np.abs(np.array(mat).reshape(want.shape) - want).max())
            for (code, mat), want in zip(got, expected, strict=True)
        ]
        scale = max((float(np.abs(want).max()) for want in expected if want.size), default=1.0)
        if all(isinstance(e, float) and e <= 1e-3 * max(1.0, scale) for e in errors):
            return batched
        problems.append(f"{'with' if batched else 'without'} the batch axis: output errors {errors}")
    volumes = any(x.ndim == 5 for x in inputs)
    raise LoweringError(
        f"ncnn: the engine {names[0]} does not give PyTorch's values on the example image, fed "
        + "; or ".join(problems)
        + (". A per-image input is a 3-D volume (c, d, h, w): ncnn's 3-D layers (convolution, upsampling, "
           "normalization over d, h, w) do not give PyTorch's values for this graph" if volumes else
           ". pnnx placed the batch axis differently from the graph")
        + "; onnxruntime, openvino and torchscript run it (fxdeploy.lower(..., target='onnxruntime'))"
    )


def _graph_batch(gm: torch.fx.GraphModule) -> str | None:
    """The batch (dim 0 of the first graph input), as ``_batch_symbol`` spells it."""
    first = next((n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"), None)
    return str(first.shape[0]) if isinstance(first, torch.Tensor) and first.dim() > 0 else None


def _shared_inputs(stage: torch.fx.GraphModule, batch: str) -> list[int]:
    """Inputs of a later engine stage that carry no batch axis: what a host stage made from the
    image's size alone (RT-DETR's anchors and position embedding at a dynamic H/W, after
    ``unit_broadcasts`` dropped their leading 1). Every image gets the same one."""
    if batch == "1":  # every input leads with a 1: nothing tells the batch from a leading 1
        return []
    values = [n.meta.get("val") for n in stage.graph.nodes if n.op == "placeholder"]
    return [
        k for k, v in enumerate(values)
        if isinstance(v, torch.Tensor) and v.dtype == torch.float32 and (v.dim() == 0 or str(v.shape[0]) != batch)
    ]


def _with_leading_one(stage: torch.fx.GraphModule, shared: list[int]) -> torch.fx.GraphModule:
    """``stage`` taking each shared input with a leading 1, squeezed off first: the engine then
    takes it as it takes an image, whose batch axis pnnx drops."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    placeholders = [n for n in stage.graph.nodes if n.op == "placeholder"]
    for k, node in enumerate(placeholders):  # the squeezed value keeps the name the stage's nodes use
        outer = graph.placeholder(f"{node.name}_with_one" if k in shared else node.name)
        outer.meta = dict(node.meta)
        if k in shared:
            outer.meta["val"] = node.meta["val"].unsqueeze(0)
            env[node] = graph.create_node("call_function", torch.ops.aten.squeeze.dim, (outer, 0), name=node.name)
            env[node].meta = dict(node.meta)
        else:
            env[node] = outer
    for node in stage.graph.nodes:
        if node.op != "placeholder":
            env[node] = graph.node_copy(node, lambda a: env[a])
    wrapped = torch.fx.GraphModule(stage, graph)
    wrapped.eval()
    return wrapped


def _not_float(label: str, node: torch.fx.Node, dtype: torch.dtype) -> str:
    """What reads a non-float engine input, and what to do: ncnn's blobs hold float32 only."""
    values = [u for u in node.users if u.target is not torch.ops.aten.sym_size.int]  # not its size: its values
    readers = "; ".join(f"{user.target} at {call_site(user)}" for user in values[:3]) or "nothing"
    return (
        f"ncnn: {node.name!r} is {dtype} ({label}), and ncnn's blobs hold float32 only; its values are read "
        f"by {readers}. "
        "An engine stage cannot take integers or bools (token ids, attention masks, indices). Make the value "
        "float in the model before that op where float32 holds it exactly (ids below 2**24, 0/1 masks), or "
        "lower to onnxruntime or openvino, which take it as it is"
    )


def _batch_symbol(head: torch.fx.GraphModule, labels: list[str], shared: Sequence[int] = ()) -> str:
    """The one symbol (or static size) that dim 0 of every engine input shares; a shared input's
    leading 1 aside."""
    placeholders = [n for n in head.graph.nodes if n.op == "placeholder"]
    symbols: set[str] = set()
    for k, (label, node) in enumerate(zip(labels, placeholders, strict=True)):
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor) or value.dim() == 0:
            raise LoweringError(f"ncnn: input {label!r} has no batch dim (shape {_shape(value)})")
        if value.dtype != torch.float32:
            raise LoweringError(_not_float(label, node, value.dtype))
        _check_rank(f"input {label!r}", value)
        if k not in shared:
            symbols.add(str(value.shape[0]))
    if len(symbols) > 1:
        raise LoweringError(f"ncnn: inputs {labels} must share dim 0 (the batch), got sizes {sorted(symbols)}")
    if not symbols:
        raise LoweringError(
            f"ncnn: no input of {labels} carries the batch: the engine stage reads only values made without "
            "the images (from sizes and weights), and ncnn runs one image at a time; another target runs this graph"
        )
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
    second: list[list[int]] | None = None, names: tuple[str, str] = (PARAM, BIN),
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
        for made, name in zip((PARAM, BIN), names, strict=True):
            shutil.move(str(work / made), str(out_dir / name))


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
