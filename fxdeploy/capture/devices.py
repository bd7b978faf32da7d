"""A model or inputs on an accelerator (``cuda:0``) are captured from a CPU copy.

fxdeploy's artifacts run on CPU runtimes (ONNX Runtime, OpenVINO, ncnn, TorchScript), and
TensorRT builds its engine from a device-free ONNX file, so capture and lower()'s check run on
the CPU. The copy shares nothing with the user's model: each parameter and buffer is copied to
the CPU once (``copy.deepcopy`` with a memo, so the accelerator holds no second copy), and the
model itself is left where it is. A model that names its device in code (``torch.zeros(...,
device="cuda")``) still fails to capture, with torch's error; one that makes its tensors on its
inputs' device (``device=x.device``) follows the copy.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import torch
from torch.utils import _pytree as pytree

logger = logging.getLogger(__name__)


def on_cpu(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> tuple[
    torch.nn.Module, tuple[Any, ...], dict[str, Any] | None
]:
    """``model``, ``args`` and ``kwargs`` as they are where all are on the CPU; otherwise CPU copies."""
    devices = {t.device for t in _tensors(model, args, kwargs)} - {torch.device("cpu")}
    if not devices:
        return model, args, kwargs
    logger.info("the model or its inputs are on %s: captured from a CPU copy (fxdeploy's runtimes run on the "
                "CPU; Deployed returns its outputs on the inputs' device)", ", ".join(sorted(map(str, devices))))
    copied = cpu_copy(model) if isinstance(model, torch.nn.Module) else model
    return copied, *pytree.tree_map_only(torch.Tensor, _cpu, (args, kwargs))


def cpu_copy(module: torch.nn.Module) -> torch.nn.Module:
    """A deep copy of ``module`` whose parameters and buffers are on the CPU."""
    memo: dict[int, Any] = {}
    for tensor in [*module.parameters(), *module.buffers()]:
        if id(tensor) in memo:
            continue
        moved = tensor.detach().to("cpu", copy=True)
        if isinstance(tensor, torch.nn.Parameter):
            moved = torch.nn.Parameter(moved, requires_grad=tensor.requires_grad)
        memo[id(tensor)] = moved
    return copy.deepcopy(module, memo)


def _tensors(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> list[torch.Tensor]:
    state = [*model.parameters(), *model.buffers()] if isinstance(model, torch.nn.Module) else []
    leaves = pytree.tree_leaves((args, kwargs))
    return state + [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


def _cpu(tensor: torch.Tensor) -> torch.Tensor:
    return tensor if tensor.device.type == "cpu" else tensor.detach().cpu()


def graph_on_cpu(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` (a dynamo graph) whose device constants say the CPU: dynamo records
    ``torch.arange(n, device=x.device)`` with ``x``'s device as a constant, and ``x.cuda()`` as a call."""
    moved_gm = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    for node in moved_gm.graph.nodes:
        args, kwargs = node.args, dict(node.kwargs)
        if node.op == "call_method" and node.target == "cuda":
            node.target, args, kwargs = "cpu", args[:1], {}
        elif node.op == "call_method" and node.target == "to":
            args = (args[0], *(_device_free(a, named=True) for a in args[1:]))
        if "device" in kwargs:
            kwargs["device"] = _device_free(kwargs["device"], named=True)
        args = torch.fx.node.map_aggregate(args, _device_free)
        node.args, node.kwargs = args, kwargs
    moved_gm.recompile()
    return moved_gm


def _device_free(value: Any, named: bool = False) -> Any:
    """A device other than the CPU, as the CPU; ``named``: a string there names a device (``"cuda:0"``)."""
    if isinstance(value, torch.device) and value.type != "cpu":
        return torch.device("cpu")
    if named and isinstance(value, str):
        try:
            return "cpu" if torch.device(value).type != "cpu" else value
        except RuntimeError:
            return value
    return value
