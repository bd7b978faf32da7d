"""What an ncnn engine stage can take: a float32 input (integers and bools cast to it by the
lowering) with the batch on dim 0, outputs with the batch on dim 0, at most four dims per image.
Each check names the input or output it refuses and what to do instead; the accepted outputs
become the plan's ``EngineOutput`` entries. ``input_layout`` runs the converted engine once on the
example image: how it takes its inputs, and whether it gives PyTorch's values at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from fxdeploy.artifact.ncnn_net import load_net
from fxdeploy.errors import LoweringError
from fxdeploy.lowering.ncnn_bisect import ValuesDiffer
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
        got = [extractor.extract(f"out{k}") for k in range(len(expected))]  # an empty Mat: a layer gave up
        errors = [
            "missing" if code != 0 or mat.dims == 0 else "size" if np.array(mat).size != want.size
            else _max_error(np.array(mat).reshape(want.shape), want)
            for (code, mat), want in zip(got, expected, strict=True)
        ]
        scale = max((float(np.abs(want[np.isfinite(want)]).max(initial=0.0)) for want in expected), default=1.0)
        if all(isinstance(e, float) and e <= 1e-3 * max(1.0, scale) for e in errors):
            return batched
        problems.append(f"{'with' if batched else 'without'} the batch axis: output errors {errors}")
    volumes = any(x.ndim == 5 for x in inputs)
    raise ValuesDiffer(
        f"ncnn: the engine {names[0]} does not give PyTorch's values on the example image, fed "
        + "; or ".join(problems)
        + (". A per-image input is a 3-D volume (c, d, h, w): ncnn's 3-D layers (convolution, upsampling, "
           "normalization over d, h, w) do not give PyTorch's values for this graph" if volumes else
           ". Neither way of feeding the batch axis gives them, so an op of this graph computes otherwise "
           "on ncnn (its blobs are float32: integer arithmetic, int64 indices and exact comparisons are the "
           "usual cause), or pnnx placed the batch axis differently from the graph")
        + "; onnxruntime, openvino and torchscript run it (fxdeploy.lower(..., target='onnxruntime'))"
    )


def _max_error(got: Any, want: Any) -> float:
    """The largest |got - want|; equal infinities (and NaN against NaN) count as equal, unequal ones as inf."""
    import numpy as np

    got, want = got.astype(np.float64), want.astype(np.float64)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(same, 0.0, np.abs(got - want))
    return float(np.where(np.isnan(diff), np.inf, diff).max(initial=0.0))
