"""torch.compile backends: ``torch.compile(model, backend="fxdeploy_ort")``.

Registered through the ``torch_dynamo_backends`` entry-point group, so torch finds them in a
process that never imported fxdeploy. Dynamo hands a backend a graph whose inputs include the
model's parameters and, once shapes vary, symbolic sizes; the backend freezes parameters and
buffers into the artifact (a deployed graph does not see later weight updates), derives the
sizes from the tensors, and marks those dims dynamic.

Dynamo cuts a model where it cannot trace on (a per-image loop over data-dependent detections
gives many graphs, some with no output at all). Each graph fxdeploy can lower is lowered; one it
cannot take (a size input no tensor's shape holds, a refusal of the lowering, a failure of the
artifact on an input) runs as the GraphModule dynamo gave, eagerly, with one
``CompileFallbackWarning`` naming the reason. The compiled model never raises for fxdeploy's sake.
A graph with nothing to deploy (no output) runs eagerly without a word.
"""

from __future__ import annotations

import inspect
import logging
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from fxdeploy.errors import CompileFallbackWarning, first_line

logger = logging.getLogger(__name__)


class _GraphWithConstants(torch.nn.Module):
    """Calls a dynamo graph with parameters and sizes filled in; only data tensors come in."""

    def __init__(
        self, gm: torch.fx.GraphModule, layout: list[tuple[str, Any]], constants: list[torch.Tensor]
    ) -> None:
        super().__init__()
        self.gm = gm
        self.layout = layout
        for i, tensor in enumerate(constants):
            self.register_buffer(f"const_{i}", tensor.detach(), persistent=False)

    def forward(self, *inputs: torch.Tensor) -> Any:
        args: list[Any] = []
        for kind, where in self.layout:
            if kind == "input":
                args.append(inputs[where])
            elif kind == "const":
                args.append(getattr(self, f"const_{where}"))
            else:
                tensor_index, dim = where
                args.append(inputs[tensor_index].shape[dim])
        return self.gm(*args)


def _split_inputs(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
) -> tuple[list[tuple[str, Any]], list[torch.Tensor], list[torch.Tensor], list[dict[int, Any] | None]]:
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    layout: list[tuple[str, Any]] = []
    constants: list[torch.Tensor] = []
    data: list[torch.Tensor] = []
    fakes: list[Any] = []
    for node, value in zip(placeholders, example_inputs, strict=True):
        if isinstance(value, torch.Tensor) and _is_module_state(node, value):
            layout.append(("const", len(constants)))
            constants.append(value)
        elif isinstance(value, torch.Tensor):
            layout.append(("input", len(data)))
            data.append(value)
            fakes.append(node.meta.get("example_value"))
        else:
            layout.append(("size", node.meta.get("example_value", value)))
    dims: dict[str, torch.export.Dim] = {}
    shapes: list[dict[int, Any] | None] = []
    locations: dict[str, tuple[int, int]] = {}
    for index, fake in enumerate(fakes):
        entry: dict[int, Any] = {}
        for axis, size in enumerate(getattr(fake, "shape", ())):
            if isinstance(size, torch.SymInt):
                symbol = str(size.node.expr)
                if symbol.isidentifier():
                    dims.setdefault(symbol, torch.export.Dim(f"d_{symbol}", min=1))
                    entry[axis] = dims[symbol]
                    locations.setdefault(symbol, (index, axis))
        shapes.append(entry or None)
    for i, (kind, where) in enumerate(layout):
        if kind == "size":
            symbol = str(where.node.expr) if isinstance(where, torch.SymInt) else None
            if symbol not in locations:
                raise NotImplementedError(
                    f"graph input #{i} is a size ({where}) that no input tensor's shape holds"
                )
            layout[i] = ("size", locations[symbol])
    return layout, constants, data, shapes


def _is_module_state(node: torch.fx.Node, value: torch.Tensor) -> bool:
    """Parameters and buffers of the model: frozen into the artifact, not fed on every call."""
    if isinstance(value, torch.nn.Parameter):
        return True
    source = getattr(node.meta.get("grapharg"), "source", None)
    guard_source = getattr(source, "guard_source", None)
    guard_source = guard_source() if callable(guard_source) else guard_source
    checks = ("is_specialized_nn_module", "is_unspecialized_nn_module")
    return any(getattr(guard_source, check, lambda: False)() for check in checks)


def _named_inputs(module: _GraphWithConstants, count: int) -> _GraphWithConstants:
    """Give ``forward(*inputs)`` a signature of named inputs, so dynamic_shapes bind by name."""
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] + [
        inspect.Parameter(f"input_{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD) for i in range(count)
    ]

    def forward(self: _GraphWithConstants, *inputs: torch.Tensor) -> Any:
        return _GraphWithConstants.forward(self, *inputs)

    forward.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    module.__class__ = type("DynamoGraph", (_GraphWithConstants,), {"forward": forward})
    return module


Backend = Callable[[torch.fx.GraphModule, list[Any]], Callable[..., Any]]


def make_backend(target: str, name: str | None = None) -> Backend:
    """A torch.compile backend lowering each captured graph to ``target``; ``name`` is the one it
    is registered under (``torch_dynamo_backends`` entry point), ``fxdeploy_<target>`` by default."""
    label = name or f"fxdeploy_{target}"

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        if not _returns_tensors(gm):
            logger.debug("%s: a graph with no tensor output runs as dynamo gave it", label)
            return gm
        try:
            layout, constants, data, shapes = _split_inputs(gm, example_inputs)
        except NotImplementedError as exc:
            return _Runner(gm, label, None, [], [], reason=str(exc))
        if not data:
            return _Runner(gm, label, None, [], [], reason="it reads no input tensor, only weights and sizes")
        if any(t.device.type != "cpu" for t in [*data, *constants]):  # lowered from a CPU copy (capture/devices.py)
            from fxdeploy.capture.devices import graph_on_cpu

            wrapper = _named_inputs(_GraphWithConstants(graph_on_cpu(gm), layout, constants), len(data))
        else:
            wrapper = _named_inputs(_GraphWithConstants(gm, layout, constants), len(data))
        dynamic = {f"input_{i}": s for i, s in enumerate(shapes)} if any(shapes) else None
        positions = [i for i, (kind, _) in enumerate(layout) if kind == "input"]
        lower = _lowering(wrapper, target, dynamic)
        return _Runner(gm, label, lower, positions, [t.detach().clone() for t in data])

    backend.__name__ = label
    return backend


def _lowering(wrapper: torch.nn.Module, target: str, dynamic: Any) -> Callable[[list[torch.Tensor]], Any]:
    def lower(examples: list[torch.Tensor]) -> Any:
        import fxdeploy

        return fxdeploy.lower(wrapper, tuple(examples), target=target, dynamic_shapes=dynamic)

    return lower


class _Runner:
    """One dynamo graph: its deployed artifact, lowered at the first call, or the graph itself,
    run eagerly, once a reason says fxdeploy cannot take it."""

    def __init__(
        self, gm: torch.fx.GraphModule, label: str, lower: Callable[[list[torch.Tensor]], Any] | None,
        positions: list[int], examples: list[torch.Tensor], reason: str | None = None,
    ) -> None:
        self.gm, self.label, self.lower, self.positions, self.examples = gm, label, lower, positions, examples
        self.lowered: Any = None
        self.reason: str | None = None
        self.lock = threading.Lock()
        if reason is not None:
            self._fall_back(reason)

    def deployed(self) -> Any:
        """The artifact, lowered now if not yet; None where the graph runs eagerly."""
        # Lowering runs at the first call, outside dynamo's compile context: torch.export nested
        # inside a backend compile mis-handles guards on symbolic sizes.
        with self.lock:
            if self.lowered is None and self.reason is None and self.lower is not None:
                try:
                    self.lowered = self.lower(self.examples)
                except Exception as exc:  # noqa: BLE001 - the graph runs eagerly; the warning says why
                    self._fall_back(first_line(exc))
                self.examples = []
        return self.lowered

    def __call__(self, *args: Any) -> Any:
        deployed = self.deployed()
        if deployed is None:
            return self.gm(*args)
        try:
            return deployed(*(args[i] for i in self.positions))
        except Exception as exc:  # noqa: BLE001 - e.g. an input outside the artifact's range
            self._fall_back(f"the artifact failed on inputs {[tuple(a.shape) for a in args if hasattr(a, 'shape')]}: "
                            f"{first_line(exc)}")
            return self.gm(*args)

    def _fall_back(self, reason: str) -> None:
        self.reason, self.lowered = reason, None
        ops = sum(n.op == "call_function" for n in self.gm.graph.nodes)
        text = f"{self.label}: a graph of {ops} ops runs eagerly, as dynamo gave it: {reason}".replace("\n", " ")
        warnings.warn_explicit(text, CompileFallbackWarning, "fxdeploy", 0)  # one line: no source line to show


def _returns_tensors(gm: torch.fx.GraphModule) -> bool:
    output = next(n for n in gm.graph.nodes if n.op == "output")
    leaves = torch.utils._pytree.tree_leaves(output.args)
    return any(isinstance(leaf, torch.fx.Node) and isinstance(
        leaf.meta.get("example_value", leaf.meta.get("val")), torch.Tensor) for leaf in leaves)


fxdeploy_ort = make_backend("onnxruntime", "fxdeploy_ort")
fxdeploy_openvino = make_backend("openvino", "fxdeploy_openvino")
fxdeploy_ncnn = make_backend("ncnn", "fxdeploy_ncnn")
fxdeploy_trt = make_backend("tensorrt", "fxdeploy_trt")
fxdeploy_torchscript = make_backend("torchscript", "fxdeploy_torchscript")
