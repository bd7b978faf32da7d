"""Which ops of an INT8 artifact stay float, decided from its graph.

A network's last weighted layers (conv, matmul) make the values the outputs are computed from:
class logits, box offsets. What follows them turns those into scores, boxes and detections:
sigmoid/softmax, the box decode, ``multiclass_nms``, the padding. Quantizing that tail rounds
every score onto a grid of at most 256 values (ties, or zeros after a sigmoid of clipped logits),
and every box onto a grid as coarse as the image; Ultralytics' INT8 exports lose their mAP there.

So the float region is: walking back from each graph output, every op reached before a weighted
layer, and the weighted layers where the walk stops (their output is that tail's input: the
logits). Everything upstream of them is quantized. The rule reads op types only, so it holds for
classifiers (the last linear layer stays float), detectors and any other graph alike.
"""

from __future__ import annotations

import onnx

WEIGHTED = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "Attention"})


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
            if node.op_type in WEIGHTED:
                kept[node.name] = f"the last weighted layer ({node.op_type}) before output {output.name!r}"
                continue
            kept[node.name] = f"between the last weighted layer and output {output.name!r}"
            stack.extend(name for name in node.input if name)
    return kept
