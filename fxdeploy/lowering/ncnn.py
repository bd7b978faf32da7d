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

import tempfile
from pathlib import Path
from typing import Any

import torch

from fxdeploy.artifact.jit_warnings import quiet_jit
from fxdeploy.artifact.ncnn_net import as_ids
from fxdeploy.errors import LoweringError
from fxdeploy.lowering.ncnn_bisect import Probe, ValuesDiffer, blamed, first_differing
from fxdeploy.lowering.ncnn_checks import batch_first, batch_symbol, head_outputs, input_layout
from fxdeploy.lowering.ncnn_convert import (
    BIN,
    PARAM,
    InputPassedThrough,
    UnconvertedLayers,
    check_blobs,
    check_layers,
    convert,
    layers,
    second_shapes,
)
from fxdeploy.lowering.ncnn_fallback import layer_kinds, lower_with_host_fallback
from fxdeploy.lowering.ncnn_ids import exact_casts_as_noops, id_inputs
from fxdeploy.lowering.ncnn_inputs import (
    graph_batch,
    grouped_inputs,
    shared_inputs,
    with_float_inputs,
    with_groups,
    with_leading_one,
)
from fxdeploy.lowering.ncnn_sizes import refuse_fixed_sizes
from fxdeploy.lowering.torchscript import script_graph, trace_graph
from fxdeploy.partition import Engine, Host, HostOp, Plan, Source, Stage
from fxdeploy.partition.cut import Part, split_parts
from fxdeploy.partition.host_reasons import COPIED_IN, HOST_REASON
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
    batch = graph_batch(gm)
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
            try:
                work: Engine | Host = _lower_engine(
                    stage.module, args, labels, names, out_dir, engine_files(s), fp16=fp16, batch=batch)
            except InputPassedThrough as exc:
                raise LoweringError(f"{exc}{_on_the_host(stages)}; lower to torchscript or onnxruntime") from None
            except LoweringError as exc:
                if s == 0 or type(exc) is not LoweringError or not _on_the_host(stages):  # a subclass is caught above
                    raise
                raise LoweringError(f"{exc} (stage {s} is the graph after the host's work{_on_the_host(stages)})"
                                    ) from exc
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


def _on_the_host(stages: list[Part]) -> str:
    """The ops the host stages run, each with why, for a refusal."""
    ops = [f"{op.op} ({op.why})" for stage in stages if stage.kind != "engine" for op in _host_ops(stage.module)]
    return f"; the graph's work runs on the host: {'; '.join(ops)}" if ops else ""


def _is_empty(stage: Part) -> bool:
    """An engine stage with no work: the split moved all of it into a later one."""
    nodes = list(stage.module.graph.nodes)
    output = next(n for n in nodes if n.op == "output")
    return not stage.inputs and not output.args[0] and not any(n.op == "call_function" for n in nodes)


def _lower_engine(
    module: torch.fx.GraphModule, args: list[torch.Tensor], labels: list[str], output_names: list[str] | None,
    out_dir: Path, names: tuple[str, str], *, fp16: bool, batch: str | None = None, bisect: bool = True,
) -> Engine:
    """Trace one engine stage at one image, convert it with pnnx, and check what ncnn can run;
    where its values differ from PyTorch's, ``bisect`` finds the first op that does (``ncnn_bisect``)."""
    given, given_args = module, args
    grouped = grouped_inputs(module, batch) if batch is not None else {}
    if grouped and len(grouped) == len(args) and len(set(grouped.values())) == 1:
        # it reads only rows, k per image (a text encoder's): each call takes one row, its own batch
        first = next(n for n in module.graph.nodes if n.op == "placeholder")
        batch, grouped = str(first.meta["val"].shape[0]), {}
    shared = [k for k in shared_inputs(module, batch) if k not in grouped] if batch is not None else []
    if shared:
        module = with_leading_one(module, shared)
        args = [x[None] if k in shared else x for k, x in enumerate(args)]
    if grouped:  # one image's rows, as a shared input is taken
        module = with_groups(module, grouped)
        args = [x[None, :grouped[k]] if k in grouped else x for k, x in enumerate(args)]
    exact = [k for k, x in enumerate(args) if not x.is_floating_point() and not x.is_complex()]
    if exact:
        module = with_float_inputs(module, exact)
        args = [x.float() if k in exact else x for k, x in enumerate(args)]
    batch = batch_symbol(module, labels, [*shared, *grouped])
    module, axes = batch_first(module, batch)
    outputs = head_outputs(module, batch, output_names, axes)
    per_image = [x[:1] for x in args]
    traced = _traced(module, per_image, batch)
    second = second_shapes(module)
    pnnx_graph = convert(traced, per_image, out_dir, fp16=fp16, second=second, names=names)
    exact_casts_as_noops(out_dir / names[0], pnnx_graph, set(exact))
    try:
        check_layers(out_dir / names[0], dynamic_sizes=second is not None)
    except UnconvertedLayers as exc:  # for the host fallback: which stage, and pnnx's view of it
        exc.module, exc.pnnx_graph = module, pnnx_graph
        raise
    check_blobs(out_dir / names[0], len(args), len(outputs))
    ids = id_inputs(out_dir / names[0], set(exact), labels)
    with torch.no_grad():
        expected = [y.detach().float().numpy() for y in module(*per_image)]
    fed = [as_ids(x.detach().numpy()) if k in ids else x.detach().numpy() for k, x in enumerate(per_image)]
    try:
        batched = input_layout(out_dir, names, fed, expected)
    except UnconvertedLayers as exc:  # a layer ncnn cannot load: for the host fallback too
        exc.module, exc.pnnx_graph = module, pnnx_graph
        raise
    except ValuesDiffer as exc:  # which op pnnx got wrong, for the host fallback
        if not bisect:
            raise
        found = first_differing(given, batch, _probe(given_args, labels, fp16, batch))
        raise ValuesDiffer(str(exc), blamed(*found) if found is not None else {}) from None
    return Engine(names[0], names[1], tuple(f"in{k}" for k in range(len(args))), tuple(outputs),
                  batched_inputs=batched, shared_inputs=tuple(shared), id_inputs=tuple(sorted(ids.items())),
                  grouped_inputs=tuple(sorted(grouped.items())))


def _traced(module: torch.fx.GraphModule, per_image: list[torch.Tensor], batch: str) -> torch.jit.ScriptModule:
    """The stage traced at one image; first refused where the trace would fix a size computed from a
    dynamic height/width (``ncnn_sizes``: lower() then lowers at the example's size)."""
    refuse_fixed_sizes(module)
    try:
        return trace_graph(module, per_image, target="ncnn")
    except LoweringError as exc:
        if batch.isdigit() and int(batch) > 1:
            raise LoweringError(
                f"{exc}\n  ncnn runs one image at a time, so the graph is traced at batch 1, and this "
                f"graph has its batch fixed at {batch}; lower it with a dynamic batch "
                "(dynamic_shapes={<input>: {0: 'batch'}})"
            ) from exc
        raise


def _probe(args: list[torch.Tensor], labels: list[str], fp16: bool, batch: str | None) -> Probe:
    """Whether a prefix of a stage (taking the stage inputs listed) gives other values than PyTorch
    on ncnn; a prefix that does not lower otherwise is not blamed."""
    def differs(part: torch.fx.GraphModule, kept: list[int]) -> str | None:
        with tempfile.TemporaryDirectory(prefix="fxdeploy-bisect-") as work:
            try:
                _lower_engine(part, [args[k] for k in kept], [labels[k] for k in kept], None, Path(work),
                              (PARAM, BIN), fp16=fp16, batch=batch, bisect=False)
            except ValuesDiffer:
                writer = [f"{layer.kind} {layer.name}" for layer in layers(Path(work) / PARAM) if "out0" in layer.tops]
                return writer[0] if writer else "(unnamed)"
            except LoweringError:
                return None
        return None

    return differs
