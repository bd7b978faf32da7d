"""Which ops of an INT8 artifact stay float, decided from its graph.

A network's last weighted layers (conv, matmul) make the values the outputs are computed from:
class logits, box offsets. What follows them turns those into scores, boxes and detections:
sigmoid/softmax, the box decode, ``multiclass_nms``, the padding. Quantizing that tail rounds
every score onto a grid of at most 256 values (ties, or zeros after a sigmoid of clipped logits),
and every box onto a grid as coarse as the image; Ultralytics' INT8 exports lose their mAP there.

So the float region is: walking back from each graph output, every op reached before a weighted
layer, and the weighted layers where the walk stops (their output is that tail's input: the
logits). Everything upstream of them is quantized. One weighted layer does not stop the walk: one
that reads a softmax or sigmoid (through reshapes only) takes an expectation over a distribution,
which is box decoding (YOLOv8/11's DFL: a fixed 1x1 conv over a softmax of 16 bins); the walk goes
on through it to the layer that made the distribution's logits. The rule reads op types only, so
it holds for classifiers (the last linear layer stays float), detectors and any other graph alike.
"""

from __future__ import annotations

import onnx

WEIGHTED = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "Attention"})
DISTRIBUTIONS = frozenset({"Softmax", "LogSoftmax", "Sigmoid"})
RESHAPES = frozenset({"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Cast"})


def float_nodes(model: onnx.ModelProto) -> dict[str, str]:
    """The names of the nodes to keep float, each with why."""
    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}
    kept: dict[str, str] = {}
    for output in graph.output:
        stack = [output.name]
        while stack:
            node = producer.get(stack.pop())
            if node is None or node.name in kept:
                continue
            if node.op_type in WEIGHTED and not _over_a_distribution(node, producer):
                kept[node.name] = f"the last weighted layer ({node.op_type}) before output {output.name!r}"
                continue
            if node.op_type in WEIGHTED:
                kept[node.name] = (f"box decoding before output {output.name!r}: a {node.op_type} over a softmax or "
                                   "sigmoid (an expectation over bins, as in DFL)")
                stack.extend(name for name in node.input if name)
                continue
            kept[node.name] = f"between the last weighted layer and output {output.name!r}"
            stack.extend(name for name in node.input if name)
    return kept


def _over_a_distribution(node: onnx.NodeProto, producer: dict[str, onnx.NodeProto]) -> bool:
    """Whether an input of ``node`` is a softmax or sigmoid, through reshapes only."""
    stack = list(node.input)
    while stack:
        source = producer.get(stack.pop())
        if source is None:
            continue
        if source.op_type in DISTRIBUTIONS or _is_softmax(source, producer):
            return True
        if source.op_type in RESHAPES:
            stack.extend(source.input[:1])
    return False


def _is_softmax(node: onnx.NodeProto, producer: dict[str, onnx.NodeProto]) -> bool:
    """Whether ``node`` ends a softmax written as reductions, ``e / ReduceSum(e)`` with ``e`` an
    Exp (the ``standard`` lowering of a softmax over a non-last axis)."""
    if node.op_type != "Div" or len(node.input) != 2:
        return False
    exp, total = (producer.get(name) for name in node.input)
    return (exp is not None and exp.op_type == "Exp" and total is not None and total.op_type == "ReduceSum"
            and total.input[0] == node.input[0])
