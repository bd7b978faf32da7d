"""What an ncnn engine stage can take: a float32 input with the batch on dim 0, outputs with the
batch on dim 0, at most four dims per image. Each check names the input or output it refuses
and what to do instead; the accepted outputs become the plan's ``EngineOutput`` entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from fxdeploy.errors import LoweringError
from fxdeploy.partition import EngineOutput
from fxdeploy.passes.graph_utils import call_site

MAX_RANK = 4  # an ncnn Mat holds at most w, h, d, c per image
OUTPUT_DTYPES = (torch.float32, torch.float16, torch.int64, torch.int32, torch.bool)


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


def head_outputs(head: torch.fx.GraphModule, batch: str, names: list[str] | None) -> list[EngineOutput]:
    """The engine's outputs as blobs out0, out1, ..., each with its per-image shape (-1 where a
    dynamic size) and the dtype to cast back to."""
    output = next(n for n in head.graph.nodes if n.op == "output")
    specs: list[EngineOutput] = []
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
        specs.append(EngineOutput(
            f"out{k}",
            tuple(-1 if isinstance(d, torch.SymInt) else int(d) for d in value.shape[1:]),
            str(value.dtype).removeprefix("torch."),
        ))
    return specs


def _check_rank(label: str, value: torch.Tensor) -> None:
    """ncnn blobs drop the batch; what is left must fit a Mat."""
    if value.dim() - 1 > MAX_RANK:
        raise LoweringError(
            f"ncnn: {label} has rank {value.dim()}; ncnn holds at most {MAX_RANK} dims per image"
        )



def _shape(value: Any) -> str:
    return str(list(value.shape)) if isinstance(value, torch.Tensor) else type(value).__name__
