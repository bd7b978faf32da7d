"""An op that draws random numbers is refused, naming the line that calls it.

``torch.randn_like``, ``torch.rand``, ``bernoulli``, ``multinomial`` or a dropout run with
``training=True`` draw new numbers on every call (torch tags them ``nondeterministic_seeded``): the
artifact's outputs would change from call to call, and no check can compare them with eager's. The
runtimes disagree too (ONNX Runtime has no RandomNormalLike for opset 22; OpenVINO and TorchScript
draw from their own generators). Deployed inference is deterministic: the noise is an input.
"""

from __future__ import annotations

import torch

from fxdeploy.passes.base import PassResult
from fxdeploy.passes.graph_utils import call_site
from fxdeploy.settings import Settings


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
    return None if torch.Tag.nondeterministic_seeded in tags else "draws no random numbers"
