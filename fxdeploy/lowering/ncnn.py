"""ncnn lowering through pnnx: trace the engine part at one image, convert it, check the layers.

ncnn blobs have no batch axis: the executor runs the net once per image and stacks the results,
which is exact for batch-independent models (the verification after lowering runs the example
batch and would catch a model that mixes images). The engine part is traced at batch 1. Other
dims (an image's height and width) may be dynamic too: pnnx is then given a second input shape
(``inputshape2``) so that it keeps those sizes symbolic, and the verification at the min, opt and
max sizes catches a graph that baked one in.
After ``host_postprocess_split``, each engine stage goes to ncnn (``model.ncnn.param`` for the
first, ``model.<stage>.ncnn.param`` for one after a host stage), and each host stage is scripted
to ``host.<stage>.pt`` and runs on the host (NMS with the reference kernel). The stages are
written into the manifest as a ``fxdeploy.partition.Plan``, which the runtime follows. What an
engine stage can take is checked in ``ncnn_checks``; pnnx is run in ``ncnn_convert``. An op pnnx
leaves unconverted is moved to a host stage and the graph cut and lowered again (``ncnn_fallback``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from fxdeploy.artifact.jit_warnings import quiet_jit
from fxdeploy.artifact.ncnn_net import load_net
from fxdeploy.errors import LoweringError
from fxdeploy.lowering.ncnn_checks import batch_symbol, head_outputs
from fxdeploy.lowering.ncnn_convert import (
    BIN,
    PARAM,
    UnconvertedLayers,
    check_blobs,
    check_layers,
    convert,
    second_shapes,
)
from fxdeploy.lowering.ncnn_fallback import layer_kinds, lower_with_host_fallback
from fxdeploy.lowering.torchscript import script_graph, trace_graph
from fxdeploy.partition import Engine, Host, HostOp, Plan, Source, Stage
from fxdeploy.partition.cut import Part, split_parts
from fxdeploy.partition.host_nodes import COPIED_IN, HOST_REASON
from fxdeploy.settings import Settings


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
    settings: Settings,
) -> tuple[list[str], dict[str, Any], dict[str, str]]:
    """Write each stage's files (param/bin per engine stage, a script per host stage); return the
    files, the plan the executor follows, as the manifest holds it, and the nodes moved to the host
    because pnnx left their ops unconverted (``ncnn_fallback``), each with why."""
    def lower(graph: torch.fx.GraphModule) -> tuple[list[str], dict[str, Any]]:
        return _lower_stages(graph, example_inputs, input_names, output_names, out_dir, fp16=settings.ncnn.fp16)

    (files, plan), moved = lower_with_host_fallback(gm, lower, out_dir, settings)
    if moved and not any(stage["kind"] == "engine" for stage in plan["stages"]):
        raise LoweringError(
            f"ncnn: pnnx left op(s) that ncnn cannot run: {', '.join(layer_kinds(moved))}, and with them on the "
            "host no work is left for ncnn's engine; lower to torchscript or onnxruntime"
        )
    return files, plan, moved


def _lower_stages(
    gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor], input_names: list[str], output_names: list[str],
    out_dir: Path, *, fp16: bool,
) -> tuple[list[str], dict[str, Any]]:
    parts = split_parts(gm)
    if parts is None:
        stages = [Part("engine", gm, [Source.graph_input(i) for i in range(len(example_inputs))])]
        outputs = [Source(0, k) for k in range(len(output_names))]
    else:
        stages, outputs = parts.stages, parts.outputs
    batch = _graph_batch(gm)
    values = {Source.graph_input(i): x for i, x in enumerate(example_inputs)}
    planned: list[Stage] = []
    for s, stage in enumerate(stages):
        args = [values[source] for source in stage.inputs]
        if _is_empty(stage):
            planned.append(Stage((), None))
            continue
        if stage.kind == "engine":
            labels = [input_names[source.index] if source.stage is None and s == 0 else f"stage {s} input #{k}"
                      for k, source in enumerate(stage.inputs)]
            names = output_names if parts is None else None
            work: Engine | Host = _lower_engine(
                stage.module, args, labels, names, out_dir, engine_files(s), fp16=fp16, batch=batch)
        else:
            work = _write_host(stage.module, out_dir / f"host.{s}.pt")
        planned.append(Stage(tuple(stage.inputs), work))
        if s + 1 < len(stages):  # example values for the stages after it
            with torch.no_grad():
                results = stage.module(*args)
            values.update((Source(s, k), value) for k, value in enumerate(results))
    files = [name for stage in planned for name in _files(stage.work)]
    return files, Plan(tuple(planned), tuple(outputs)).to_dict()


def _files(work: Engine | Host | None) -> list[str]:
    return [work.param, work.bin] if isinstance(work, Engine) else [work.file] if isinstance(work, Host) else []


def _write_host(module: torch.fx.GraphModule, path: Path) -> Host:
    """Script a host stage; the plan lists its ops and why each is there (the report shows them)."""
    with quiet_jit():
        script_graph(module, target="ncnn host stage").save(str(path))
    return Host(path.name, _host_ops(module))


def _host_ops(module: torch.fx.GraphModule) -> tuple[HostOp, ...]:
    """The ops a host stage runs, each once, in graph order (``aten.topk.default``), with the
    reasons the cut gave its nodes (an op several nodes run may have more than one)."""
    reasons: dict[str, dict[str, None]] = {}
    for node in module.graph.nodes:
        if node.op == "call_function" and "getitem" not in str(node.target):
            reasons.setdefault(str(node.target), {})[node.meta.get(HOST_REASON, COPIED_IN)] = None
    return tuple(HostOp(op, "; ".join(why)) for op, why in reasons.items())


def _is_empty(stage: Part) -> bool:
    """An engine stage with no work: the split moved all of it into a later one."""
    nodes = list(stage.module.graph.nodes)
    output = next(n for n in nodes if n.op == "output")
    return not stage.inputs and not output.args[0] and not any(n.op == "call_function" for n in nodes)


def _lower_engine(
    module: torch.fx.GraphModule, args: list[torch.Tensor], labels: list[str], output_names: list[str] | None,
    out_dir: Path, names: tuple[str, str], *, fp16: bool, batch: str | None = None,
) -> Engine:
    """Trace one engine stage at one image, convert it with pnnx, and check what ncnn can run."""
    shared = _shared_inputs(module, batch) if batch is not None else []
    if shared:
        module = _with_leading_one(module, shared)
        args = [x[None] if k in shared else x for k, x in enumerate(args)]
    batch = batch_symbol(module, labels, shared)
    outputs = head_outputs(module, batch, output_names)
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
    second = second_shapes(module)
    pnnx_graph = convert(traced, per_image, out_dir, fp16=fp16, second=second, names=names)
    try:
        check_layers(out_dir / names[0], dynamic_sizes=second is not None)
    except UnconvertedLayers as exc:  # for the host fallback: which stage, and pnnx's view of it
        exc.module, exc.pnnx_graph = module, pnnx_graph
        raise
    check_blobs(out_dir / names[0], len(args), len(outputs))
    with torch.no_grad():
        expected = [y.detach().float().numpy() for y in module(*per_image)]
    batched = _input_layout(out_dir, names, [x.numpy() for x in per_image], expected)
    return Engine(names[0], names[1], tuple(f"in{k}" for k in range(len(args))), tuple(outputs),
                  batched_inputs=batched, shared_inputs=tuple(shared))


def _input_layout(out_dir: Path, names: tuple[str, str], inputs: list[Any], expected: list[Any]) -> bool:
    """How the engine takes its inputs, found by running it once on the example image.

    pnnx drops the batch axis of an operand when it can tell where the batch is (a convolution's
    input, an image); when it cannot (a stage that starts from [B, N, C] values a host stage
    gathered, with no such op behind them), it may keep the operand whole, with the batch as a
    leading 1, and then expects the input blob the same way. Returns False for per-image blobs,
    True for blobs that keep the leading 1; raises when neither gives PyTorch's values."""
    import ncnn
    import numpy as np

    net = load_net(out_dir / names[0], out_dir / names[1], threads=1, fp16=False, error=LoweringError)
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

