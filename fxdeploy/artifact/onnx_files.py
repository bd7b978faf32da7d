"""An ONNX file's references to external weight files, checked before any runtime opens it.

ONNX Runtime, OpenVINO and TensorRT read a tensor's ``external_data`` ``location`` relative to the
model file. The manifest hashes only the files it names, so a crafted ``model.onnx`` could point a
tensor at any file the process can read. ``check_external_data`` allows only names the manifest
lists, directly beside the model. Also the one ONNX naming convention the lowering writes and a
runtime reads (``TIE_FREE``), kept here so that neither imports the other.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import onnx

from fxdeploy.errors import ArtifactError

TIE_FREE = "fxdeploy_tie_free_topk"
"""Prefix of the outputs of TopK nodes whose result does not depend on how they order equal keys
(the keys are unique, or only each key's group is read): a runtime may leave them unstable.
OpenVINO's executor makes every other TopK stable (``fxdeploy.runtime.openvino.read_model``)."""


def check_external_data(model_path: Path, allowed: set[str]) -> None:
    """Raise ArtifactError if a tensor of ``model_path`` lives in a file outside ``allowed``."""
    try:
        model = onnx.load(str(model_path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf's own decode errors
        raise ArtifactError(f"{model_path}: not a readable ONNX model ({type(exc).__name__}: {exc})") from exc
    for tensor in _tensors(model.graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = next((e.value for e in tensor.external_data if e.key == "location"), "")
        if location not in allowed:
            raise ArtifactError(
                f"{model_path}: tensor {tensor.name!r} reads its data from {location!r}, which is not "
                f"a file of this artifact (allowed: {sorted(allowed)})"
            )


def _tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            if attribute.HasField("g"):
                yield from _tensors(attribute.g)
            for subgraph in attribute.graphs:
                yield from _tensors(subgraph)
