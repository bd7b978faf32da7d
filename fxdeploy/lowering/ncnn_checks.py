"""What an ncnn engine stage can take: a float32 input (integers and bools cast to it by the
lowering) with the batch on dim 0, outputs with the batch on dim 0, at most four dims per image.
Each check names the input or output it refuses and what to do instead; the accepted outputs
become the plan's ``EngineOutput`` entries. ``input_layout`` runs the converted engine once on the
example image: how it takes its inputs, and whether it gives PyTorch's values at all.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from fxdeploy.errors import LoweringError
from fxdeploy.lowering import ncnn_trial
from fxdeploy.lowering.ncnn_bisect import ValuesDiffer
from fxdeploy.lowering.ncnn_convert import Layer, UnconvertedLayers, layers
from fxdeploy.lowering.ncnn_trial import max_error as _max_error  # noqa: F401 - its tests read it here
from fxdeploy.partition import EngineOutput
from fxdeploy.passes.graph_utils import call_site

MAX_RANK = 4  # an ncnn Mat holds at most w, h, d, c per image
OUTPUT_DTYPES = (torch.float32, torch.float16, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
                 torch.bool)


def _not_float(label: str, node: torch.fx.Node, dtype: torch.dtype) -> str:
    """What reads an engine input of another float dtype, and what to do: ncnn's blobs hold float32 only."""
    values = [u for u in node.users if u.target is not torch.ops.aten.sym_size.int]  # not its size: its values
    readers = "; ".join(f"{user.target} at {call_site(user)}" for user in values[:3]) or "nothing"
    return (
        f"ncnn: {node.name!r} is {dtype} ({label}), and ncnn's blobs hold float32 only; its values are read "
        f"by {readers}. "
        "Integers and bools go in as float32 (exact below 2**24); other dtypes do not. Cast the value to "
        "float32 in the model before that op, or lower to onnxruntime or openvino, which take it as it is"
    )


def batch_symbol(head: torch.fx.GraphModule, labels: list[str], shared: Sequence[int] = ()) -> str:
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


def head_outputs(
    head: torch.fx.GraphModule, batch: str, names: list[str] | None, axes: list[int] | None = None,
) -> list[EngineOutput]:
    """The engine's outputs as blobs out0, out1, ..., each with its per-image shape (-1 where a
    dynamic size), the dtype to cast back to and where the batch goes back (``axes``, from ``batch_first``)."""
    output = next(n for n in head.graph.nodes if n.op == "output")
    specs: list[EngineOutput] = []
    for k, node in enumerate(output.args[0]):
        label = f"output {names[k]!r}" if names else f"engine output #{k} ({node.name})"
        value = node.meta.get("val")
        if node.op == "placeholder":
            raise LoweringError(f"ncnn: {label} is an input returned unchanged; return a copy")
        axis = axes[k] if axes else 0
        if not isinstance(value, torch.Tensor) or value.dim() == 0 or str(value.shape[0]) != batch:
            raise LoweringError(
                f"ncnn: {label} must have the batch ({batch}) as dim 0, since ncnn runs one image at "
                f"a time; got shape {_shape(value)}"
            )
        _check_rank(label, value)
        if value.dtype not in OUTPUT_DTYPES:
            raise LoweringError(f"ncnn: {label} has dtype {value.dtype}; supported: {OUTPUT_DTYPES}")
        specs.append(EngineOutput(
            f"out{k}",
            tuple(-1 if isinstance(d, torch.SymInt) else int(d) for d in value.shape[1:]),
            str(value.dtype).removeprefix("torch."),
            axis,
        ))
    return specs


def batch_first(head: torch.fx.GraphModule, batch: str) -> tuple[torch.fx.GraphModule, list[int]]:
    """``head`` with each output whose batch is not dim 0 (a decoder's [queries, B, C]) moved to lead
    with it, and where each batch was. The batch is the one dim of the output's shape that is the
    batch's symbol; a static batch tells nothing, and such outputs are left (``head_outputs`` says so)."""
    output = next(n for n in head.graph.nodes if n.op == "output")
    axes = []
    for node in output.args[0]:
        value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        at = [d for d, size in enumerate(getattr(value, "shape", ())) if str(size) == batch]
        axes.append(at[0] if len(at) == 1 and not batch.isdigit() else 0)
    if not any(axes):
        return head, axes
    graph = torch.fx.Graph()  # a copy: the stage itself still gives the graph's values to later stages
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    values = list(graph.graph_copy(head.graph, env))
    for k, axis in enumerate(axes):
        if axis:
            order = [axis, *(d for d in range(values[k].meta["val"].dim()) if d != axis)]
            moved = graph.call_function(torch.ops.aten.permute.default, (values[k], order))  # pnnx has no movedim
            moved.meta["val"] = values[k].meta["val"].permute(order)
            values[k] = moved
    graph.output(tuple(values))
    moved_head = torch.fx.GraphModule(head, graph)
    moved_head.eval()
    return moved_head, axes


def _check_rank(label: str, value: torch.Tensor) -> None:
    """ncnn blobs drop the batch; what is left must fit a Mat."""
    if value.dim() - 1 > MAX_RANK:
        raise LoweringError(
            f"ncnn: {label} has rank {value.dim()}; ncnn holds at most {MAX_RANK} dims per image"
        )



def _shape(value: Any) -> str:
    return str(list(value.shape)) if isinstance(value, torch.Tensor) else type(value).__name__


def input_layout(out_dir: Path, names: tuple[str, str], inputs: list[Any], expected: list[Any]) -> bool:
    """How the engine takes its inputs, found by running it once on the example image.

    pnnx drops the batch axis of an operand when it can tell where the batch is (a convolution's
    input, an image); when it cannot (a stage that starts from [B, N, C] values a host stage
    gathered, with no such op behind them), it may keep the operand whole, with the batch as a
    leading 1, and then expects the input blob the same way. Returns False for per-image blobs,
    True for blobs that keep the leading 1; raises when neither gives PyTorch's values. Each try
    runs in a child process (``ncnn_trial``): fed the wrong way, ncnn may crash."""
    import numpy as np

    problems: list[str] = []
    layouts = [False, True]
    with tempfile.TemporaryDirectory(prefix="fxdeploy-ncnn-trial-") as work_dir:
        work = Path(work_dir)
        np.savez(work / "trial.npz", **{f"in{k}": np.ascontiguousarray(x) for k, x in enumerate(inputs)},
                 **{f"want{k}": np.ascontiguousarray(y) for k, y in enumerate(expected)})
        while layouts:
            job = {"param": str(out_dir / names[0]), "bin": str(out_dir / names[1]), "layouts": layouts,
                   "inputs": len(inputs), "outputs": len(expected)}
            (work / "trial.json").write_text(json.dumps(job))
            code, tried = _trial(work)
            for result in tried:
                if result["ok"]:
                    return bool(result["batched"])
                found = result["errors"]
                problems.append(f"{_way(result['batched'])}: " + (
                    f"{found}, and ncnn's Mat holds at most 4 (c, d, h, w)" if isinstance(found, str)
                    else f"output errors {found}"))
            layouts = layouts[len(tried):]
            if layouts:  # the child died running the next one
                problems.append(f"{_way(layouts[0])}: ncnn crashed ({_signal(code)}) running the engine")
                layouts = layouts[1:]
    raise ValuesDiffer(_differs(names, problems, inputs))


TRIAL_TIMEOUT_S = 600
"""How long one trial run of an engine on the example image may take."""


def _trial(work: Path) -> tuple[int, list[dict[str, Any]]]:
    """The child's exit code and the layouts it tried (``ncnn_trial``), in order."""
    try:
        result = subprocess.run([sys.executable, ncnn_trial.__file__, str(work)], capture_output=True, text=True,
                                timeout=TRIAL_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise LoweringError(f"ncnn: the engine did not finish one run on the example image in {TRIAL_TIMEOUT_S} s "
                            "and was stopped; choose another target (fxdeploy check-env lists them)") from exc
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    loaded = [line["load"] for line in lines if "load" in line]
    if loaded:
        raise _unloadable(loaded[0], result.stderr, Path(json.loads((work / "trial.json").read_text())["param"]))
    return result.returncode, lines


_LOAD_FAILED = re.compile(r"layer load_param \d+ (\S+) failed")


def _unloadable(message: str, stderr: str, param: Path) -> LoweringError:
    """ncnn refused to load a layer pnnx wrote (an Einsum of an equation it has no kernel for): the
    layer, named by ncnn's own words on the child's stderr, as an unconverted one, so that the host
    fallback runs its op instead (pnnx's op for ncnn's type: ``Einsum`` -> ``torch.einsum``)."""
    names = set(_LOAD_FAILED.findall(stderr))
    graph = layers(param) if param.exists() else []
    failed = [Layer(f"torch.{layer.kind.lower()}", layer.name, layer.bottoms, layer.tops)
              for layer in graph if layer.name in names]
    if not failed:
        return LoweringError(f"{message}: {stderr.strip().splitlines()[-1] if stderr.strip() else 'ncnn said no more'}")
    said = ", ".join(f"{layer.kind} (layer {layer.name})" for layer in failed)
    return UnconvertedLayers(f"{message}: ncnn cannot load {said} as pnnx wrote it", failed, graph)


def _way(batched: bool) -> str:
    return "with the batch axis" if batched else "without the batch axis"


def _signal(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _differs(names: tuple[str, str], problems: list[str], inputs: list[Any]) -> str:
    volumes = any(x.ndim == 5 for x in inputs)  # noqa: PLR2004 - a batch of 3-D volumes
    return (
        f"ncnn: the engine {names[0]} does not give PyTorch's values on the example image, fed "
        + "; or ".join(problems)
        + (". A per-image input is a 3-D volume (c, d, h, w): ncnn's 3-D layers (convolution, upsampling, "
           "normalization over d, h, w) do not give PyTorch's values for this graph" if volumes else
           ". Neither way of feeding the batch axis gives them, so an op of this graph computes otherwise "
           "on ncnn (its blobs are float32: integer arithmetic, int64 indices and exact comparisons are the "
           "usual cause), or pnnx placed the batch axis differently from the graph")
        + "; onnxruntime, openvino and torchscript run it (fxdeploy.lower(..., target='onnxruntime'))"
    )
