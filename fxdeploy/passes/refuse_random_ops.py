"""An op that draws random numbers is refused, naming the line that calls it.

``torch.randn_like``, ``torch.rand``, ``bernoulli``, ``multinomial`` or a dropout run with
``training=True`` draw new numbers on every call (torch tags them ``nondeterministic_seeded``): the
artifact's outputs would change from call to call, and no check can compare them with eager's. The
runtimes disagree too (ONNX Runtime has no RandomNormalLike for opset 22; OpenVINO and TorchScript
draw from their own generators). Deployed inference is deterministic: the noise is an input.

torch tags ops that only may draw the same way: an LSTM, GRU or RNN (their dropout between layers),
the fused attention kernels (``dropout_p``), ``rrelu_with_noise``. Those draw only where their
dropout is above 0 while training, or where ``training`` is set; elsewhere they are deterministic,
and are not refused.
"""

from __future__ import annotations

from typing import Any

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import call_site
from fxdeploy.settings import Settings

_SWITCHES = ("train", "training")
_PROBABILITIES = ("p", "dropout", "dropout_p")


class RandomOpError(ValueError):
    """The graph draws random numbers."""


def refuse_random_ops(gm: torch.fx.GraphModule, settings: Settings) -> PassResult:
    for node in gm.graph.nodes:
        if check(node) is None:
            raise RandomOpError(
                f"{call_site(node)}: {node.target} draws new random numbers on every call, so the artifact's "
                "outputs would change from call to call and cannot be checked against eager. Pass the noise in "
                "as an input (torch.randn(...) outside the model), or take it out for deployment (dropout: "
                "training=self.training)"
            )
    return PassResult(gm, False)


def check(node: torch.fx.Node) -> str | None:
    """None when ``node`` draws random numbers (the refusal applies), else why not."""
    tags = getattr(node.target, "tags", ()) if node.op == "call_function" else ()
    if torch.Tag.nondeterministic_seeded not in tags:
        return "draws no random numbers"
    given = _named_arguments(node)
    switch = next((given[name] for name in _SWITCHES if name in given), True)
    probability = next((given[name] for name in _PROBABILITIES if name in given), None)
    if switch is False or (isinstance(probability, (int, float)) and probability == 0):
        said = ", ".join(f"{k}={v!r}" for k, v in given.items() if k in (*_SWITCHES, *_PROBABILITIES))
        return f"random only through a dropout, here off ({said})"
    return None


def _named_arguments(node: torch.fx.Node) -> dict[str, Any]:
    """The op's arguments by their schema names, defaults filled in."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return {}
    named: dict[str, Any] = {}
    for index, argument in enumerate(schema.arguments):
        if index < len(node.args):
            named[argument.name] = node.args[index]
        elif argument.name in node.kwargs:
            named[argument.name] = node.kwargs[argument.name]
        elif argument.has_default_value():
            named[argument.name] = argument.default_value
    return named
