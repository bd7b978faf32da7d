"""torch.compile backends: ``torch.compile(model, backend="fxdeploy_ort")``.

Registered through the ``torch_dynamo_backends`` entry-point group, so torch finds them in a
process that never imported fxdeploy. Dynamo hands a backend a graph whose inputs include the
model's parameters and, once shapes vary, symbolic sizes; the backend freezes parameters and
buffers into the artifact (a deployed graph does not see later weight updates), derives the
sizes from the tensors, and marks those dims dynamic.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch


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
                    f"fxdeploy backend: graph input #{i} is a size ({where}) not found in any "
                    "input tensor's shape; compile with dynamic=False"
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
    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        layout, constants, data, shapes = _split_inputs(gm, example_inputs)
        wrapper = _named_inputs(_GraphWithConstants(gm, layout, constants), len(data))
        dynamic = {f"input_{i}": s for i, s in enumerate(shapes)} if any(shapes) else None
        data_positions = [i for i, (kind, _) in enumerate(layout) if kind == "input"]
        examples = [t.detach().clone() for t in data]
        lowered: list[Any] = []
        lock = threading.Lock()

        def deployed() -> Any:
            # Lowering runs at the first call, outside dynamo's compile context: torch.export
            # nested inside a backend compile mis-handles guards on symbolic sizes.
            with lock:
                if not lowered:
                    import fxdeploy

                    lowered.append(
                        fxdeploy.lower(wrapper, tuple(examples), target=target, dynamic_shapes=dynamic)
                    )
                    examples.clear()
            return lowered[0]

        def run(*args: Any) -> Any:
            return (lowered[0] if lowered else deployed())(*(args[i] for i in data_positions))

        run.deployed = deployed  # type: ignore[attr-defined]
        return run

    backend.__name__ = name or f"fxdeploy_{target}"
    return backend


fxdeploy_ort = make_backend("onnxruntime", "fxdeploy_ort")
fxdeploy_openvino = make_backend("openvino", "fxdeploy_openvino")
fxdeploy_ncnn = make_backend("ncnn", "fxdeploy_ncnn")
fxdeploy_trt = make_backend("tensorrt", "fxdeploy_trt")
fxdeploy_torchscript = make_backend("torchscript", "fxdeploy_torchscript")
